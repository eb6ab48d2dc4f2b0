#!/usr/bin/env bash
# Pack the npm packages from release binaries (never publishes):
#   scripts/npm-pack.sh OUT_DIR PLATFORM=BINARY [PLATFORM=BINARY ...]
# PLATFORM is linux-x64, linux-arm64, darwin-x64 or darwin-arm64; BINARY is
# that platform's release build (scripts/build-release.sh prints its path).
# Writes OUT_DIR/localagents-cli-PLATFORM-VERSION.tgz for each, and the meta
# package OUT_DIR/localagents-cli-VERSION.tgz (its JS launcher,
# scripts/npm/localagents.js, with the four platform packages as
# optionalDependencies). VERSION is Cargo.toml's. A binary that runs here
# must say `localagents VERSION` to --version. Prints the tarballs' paths.
# npm pack writes fixed mtimes, so the same binary packs to the same bytes.
set -euo pipefail
here=$PWD
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$here/$1" ;; esac; }
out=$(abs "${1:?usage: scripts/npm-pack.sh OUT_DIR PLATFORM=BINARY ...}")
shift
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "npm-pack: name at least one PLATFORM=BINARY" >&2; exit 2; }
version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || { echo "npm-pack: no version in Cargo.toml" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
repo='{"type": "git", "url": "git+https://github.com/localagents/localagents.git"}'

host="$(uname -s | tr '[:upper:]' '[:lower:]')-$(uname -m)"
case $host in
  *-x86_64) host=${host%-*}-x64 ;;
  *-aarch64) host=${host%-*}-arm64 ;;
esac

pack() {
  (cd "$1" && npm pack --silent --pack-destination "$out" >/dev/null)
}

for arg in "$@"; do
  plat=${arg%%=*}
  bin=$(abs "${arg#*=}")
  case $plat in
    linux-x64) os=linux cpu=x64 what="Linux x64 (static, musl)" ;;
    linux-arm64) os=linux cpu=arm64 what="Linux arm64 (static, musl)" ;;
    darwin-x64) os=darwin cpu=x64 what="macOS x64" ;;
    darwin-arm64) os=darwin cpu=arm64 what="macOS arm64" ;;
    *) echo "npm-pack: unknown platform $plat (linux-x64, linux-arm64, darwin-x64, darwin-arm64)" >&2; exit 2 ;;
  esac
  [ -f "$bin" ] && [ -x "$bin" ] || { echo "npm-pack: $bin is not an executable file" >&2; exit 1; }
  if [ "$plat" = "$host" ]; then
    said=$("$bin" --version 2>/dev/null || true)
    [ "$said" = "localagents $version" ] || { echo "npm-pack: $bin says '$said' to --version, not 'localagents $version'" >&2; exit 1; }
  fi
  dir="$stage/$plat"
  mkdir -p "$dir/bin"
  cp "$bin" "$dir/bin/localagents"
  chmod 755 "$dir/bin/localagents"
  cat >"$dir/package.json" <<JSON
{
  "name": "@localagents/cli-$plat",
  "version": "$version",
  "description": "The localagents binary for $what. Installed by @localagents/cli and by the localagents Claude Code plugin.",
  "license": "MIT",
  "repository": $repo,
  "os": ["$os"],
  "cpu": ["$cpu"],
  "files": ["bin/localagents"],
  "preferUnplugged": true
}
JSON
  pack "$dir"
  echo "$out/localagents-cli-$plat-$version.tgz"
done

dir="$stage/meta"
mkdir -p "$dir/bin"
cp scripts/npm/localagents.js "$dir/bin/localagents.js"
chmod 755 "$dir/bin/localagents.js"
cat >"$dir/package.json" <<JSON
{
  "name": "@localagents/cli",
  "version": "$version",
  "description": "localagents: hand Claude Code's grunt work to a model on your own llama.cpp or vLLM server. The prebuilt binary for this platform, with a launcher (npx -y @localagents/cli serve).",
  "license": "MIT",
  "repository": $repo,
  "bin": { "localagents": "bin/localagents.js" },
  "files": ["bin/localagents.js"],
  "engines": { "node": ">=16" },
  "optionalDependencies": {
    "@localagents/cli-linux-x64": "$version",
    "@localagents/cli-linux-arm64": "$version",
    "@localagents/cli-darwin-x64": "$version",
    "@localagents/cli-darwin-arm64": "$version"
  }
}
JSON
pack "$dir"
echo "$out/localagents-cli-$version.tgz"
