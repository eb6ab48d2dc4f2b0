#!/usr/bin/env sh
# Install the pinned Claude Code CLI from npm into ~/.cache (once) and print
# the path of its native binary. Tests find it through LOCALAGENTS_CLAUDE.
set -eu
VERSION="${CLAUDE_CODE_VERSION:-2.1.328}"
DIR="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-claude/$VERSION"
BIN="$DIR/node_modules/@anthropic-ai/claude-code-linux-x64/claude"
if [ ! -x "$BIN" ]; then
  command -v npm >/dev/null || { echo "install-claude: npm is missing; install Node.js 18+ (it brings npm)" >&2; exit 1; }
  mkdir -p "$DIR"
  echo "install-claude: npm install @anthropic-ai/claude-code@$VERSION into $DIR" >&2
  # The postinstall only wires up a launcher; the native binary ships in
  # the optional platform package, so scripts are not needed.
  npm install --prefix "$DIR" --no-audit --no-fund --ignore-scripts --loglevel=error \
    "@anthropic-ai/claude-code@$VERSION" >&2
fi
[ -x "$BIN" ] || { echo "install-claude: $BIN is missing after npm install (only linux-x64 is wired up here)" >&2; exit 1; }
echo "$BIN"
