#!/usr/bin/env sh
# Install the pinned Claude Code CLI from npm into ~/.cache (once) and print
# the path of its native binary. Tests find it through LOCALAGENTS_CLAUDE.
# The binary ships in the platform's optional package
# (@anthropic-ai/claude-code-<os>-<cpu>[-musl], file `claude` in each), the
# one npm installs for this machine: chosen here by `uname -s`/`uname -m`.
set -eu
VERSION="${CLAUDE_CODE_VERSION:-2.1.332}"
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-claude/$VERSION"
case "$(uname -s)" in
  Linux) os=linux ;;
  Darwin) os=darwin ;;
  *) echo "install-claude: no Claude Code package is wired up here for $(uname -s) (Linux and macOS are)" >&2; exit 1 ;;
esac
case "$(uname -m)" in
  x86_64 | amd64) cpu=x64 ;;
  aarch64 | arm64) cpu=arm64 ;;
  *) echo "install-claude: no Claude Code package is wired up here for $(uname -m) (x86_64 and arm64 are)" >&2; exit 1 ;;
esac
platform="$os-$cpu"
# On a musl Linux (Alpine) npm installs the -musl package.
if [ "$os" = linux ] && ls /lib/ld-musl-* >/dev/null 2>&1; then
  platform="$platform-musl"
fi
BIN="$DIR/node_modules/@anthropic-ai/claude-code-$platform/claude"
if [ ! -x "$BIN" ]; then
  command -v npm >/dev/null || { echo "install-claude: npm is missing; install Node.js 18+ (it brings npm)" >&2; exit 1; }
  mkdir -p "$DIR"
  echo "install-claude: npm install @anthropic-ai/claude-code@$VERSION into $DIR" >&2
  # The postinstall only wires up a launcher; the native binary ships in
  # the optional platform package, so scripts are not needed.
  npm install --prefix "$DIR" --no-audit --no-fund --ignore-scripts --loglevel=error \
    "@anthropic-ai/claude-code@$VERSION" >&2
fi
[ -x "$BIN" ] || { echo "install-claude: $BIN is missing after npm install (npm installs the package of the platform node runs on: is node $platform?)" >&2; exit 1; }
echo "$BIN"
