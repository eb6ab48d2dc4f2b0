#!/usr/bin/env bash
# Build the release binary for one target, the way the release workflow
# does (.github/workflows/release.yml), and print its path on stdout.
#   scripts/build-release.sh x86_64-unknown-linux-musl
#   scripts/build-release.sh aarch64-unknown-linux-musl
#   scripts/build-release.sh aarch64-apple-darwin      (on macOS only)
# Linux targets are static musl binaries linked by cargo-zigbuild, so one
# npm package serves glibc and Alpine alike; zig and cargo-zigbuild come
# from PyPI (scripts/install-zigbuild.sh: pinned, cached under
# ~/.cache/localagents-release). macOS targets build with plain cargo on a
# macOS machine (rustls-platform-verifier needs Apple's SDK).
# Paths are remapped so the binary names no build directory.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/build-release.sh TARGET}
log() { echo "build-release: $*" >&2; }

rustup target list --installed 2>/dev/null | grep -qx "$target" || {
  log "rustup target add $target"
  rustup target add "$target" >&2
}
export RUSTFLAGS="${RUSTFLAGS:-} --remap-path-prefix=$PWD=/localagents --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo"
case $target in
  *-linux-musl)
    # zig and cargo-zigbuild from PyPI, pinned and cached (scripts/install-zigbuild.sh).
    zigbin="$(scripts/install-zigbuild.sh)"
    PATH="$zigbin:$PATH" cargo zigbuild --locked --release --bin localagents --target "$target" >&2
    ;;
  *-apple-darwin)
    cargo build --locked --release --bin localagents --target "$target" >&2
    ;;
  *) log "unsupported target $target"; exit 2 ;;
esac
out="${CARGO_TARGET_DIR:-target}/$target/release/localagents"
[ -x "$out" ] || { log "$out is missing after the build"; exit 1; }
echo "$out"
