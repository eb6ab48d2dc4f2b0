#!/usr/bin/env bash
# Lint the crate for macOS from Linux: the clippy step of .ci/run, for
# the target aarch64-apple-darwin.
#   scripts/clippy-macos.sh
# Runs `cargo clippy --locked --workspace --all-targets -- -D warnings`,
# then the same for the e2e test target (`test = false`, so --all-targets
# leaves it out), both with --target aarch64-apple-darwin. Why: the macOS
# code (src/process/macos.rs, every `#[cfg(target_os = "macos")]`) is not
# even compiled on Linux, so without this a type error there is first
# seen on a macOS machine.
# The C in the dependencies (ring, libgit2-sys, libz-sys) is compiled by
# zig through `cargo-zigbuild clippy` (its clippy subcommand; `cargo
# zigbuild clippy` would be its build command with a stray argument).
# Clippy does not link, so Apple's SDK is not needed. zig and
# cargo-zigbuild come from PyPI (ziglang, cargo-zigbuild: prebuilt wheels,
# no compile), pinned, in the venv scripts/build-release.sh uses too,
# cached under ~/.cache/localagents-release. The build files go to
# ~/.cache/localagents-ci/macos-target, apart from the Linux ones, so
# neither run invalidates the other's cache. Ends with its wall time.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s)
target=aarch64-apple-darwin
log() { echo "clippy-macos: $*" >&2; }

rustup target list --installed 2>/dev/null | grep -qx "$target" || {
  log "rustup target add $target"
  rustup target add "$target" >&2
}
# zig and cargo-zigbuild from PyPI, pinned and cached (scripts/install-zigbuild.sh);
# cargo-zigbuild runs zig as `python3 -m ziglang`: the venv's python3 first on PATH.
PATH="$(scripts/install-zigbuild.sh):$PATH"
export PATH
export CARGO_TARGET_DIR="$HOME/.cache/localagents-ci/macos-target"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
export CARGO_INCREMENTAL=0

log "cargo-zigbuild clippy --locked --target $target --workspace --all-targets -- -D warnings"
cargo-zigbuild clippy --locked --target "$target" --workspace --all-targets -- -D warnings
log "cargo-zigbuild clippy --locked --target $target --test e2e -- -D warnings"
cargo-zigbuild clippy --locked --target "$target" --test e2e -- -D warnings
log "done in $(($(date +%s) - started)) s"
