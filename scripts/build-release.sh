#!/usr/bin/env bash
# Build the release binary for one target, the way the release workflow
# does (.github/workflows/release.yml), and print its path on stdout.
#   scripts/build-release.sh x86_64-unknown-linux-musl
#   scripts/build-release.sh aarch64-unknown-linux-musl
#   scripts/build-release.sh aarch64-apple-darwin      (on macOS only)
# Linux targets are static musl binaries linked by cargo-zigbuild, so one
# npm package serves glibc and Alpine alike; zig and cargo-zigbuild come
# from PyPI (ziglang, cargo-zigbuild: prebuilt wheels, no compile), in one
# venv cached under ~/.cache/localagents-release. macOS targets build with plain cargo on a
# macOS machine (rustls-platform-verifier needs Apple's SDK).
# Paths are remapped so the binary names no build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/build-release.sh TARGET}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-release"
ZIG_VERSION=0.14.1
ZIGBUILD_VERSION=0.24.0
log() { echo "build-release: $*" >&2; }

rustup target list --installed 2>/dev/null | grep -qx "$target" || {
  log "rustup target add $target"
  rustup target add "$target" >&2
}
export RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$PWD=/localagents --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
case $target in
  *-linux-musl)
    venv="$CACHE/zigbuild-$ZIGBUILD_VERSION-zig-$ZIG_VERSION"
    if [ ! -f "$venv/.done" ]; then
      log "installing cargo-zigbuild==$ZIGBUILD_VERSION and ziglang==$ZIG_VERSION from PyPI into $venv"
      rm -rf "$venv"
      python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet "cargo-zigbuild==$ZIGBUILD_VERSION" "ziglang==$ZIG_VERSION" >&2
      touch "$venv/.done"
    fi
    # cargo-zigbuild runs zig as `python3 -m ziglang`: the venv's python3 first on PATH.
    PATH="$venv/bin:$PATH" cargo zigbuild --locked --release --bin localagents --target "$target" >&2
    ;;
  *-apple-darwin)
    cargo build --locked --release --bin localagents --target "$target" >&2
    ;;
  *) log "unsupported target $target"; exit 2 ;;
esac
out="${CARGO_TARGET_DIR:-target}/$target/release/localagents"
[ -x "$out" ] || { log "$out is missing after the build"; exit 1; }
echo "$out"
