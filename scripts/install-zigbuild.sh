#!/usr/bin/env sh
# Install zig and cargo-zigbuild from PyPI (ziglang, cargo-zigbuild:
# prebuilt wheels, no compile), pinned, into one venv cached under
# ~/.cache/localagents-release (once), and print the venv's bin directory.
# Put it first on PATH: cargo-zigbuild runs zig as `python3 -m ziglang`, so
# the venv's python3 must be the one found. Used by scripts/build-release.sh
# (the static Linux release binaries) and scripts/clippy-macos.sh (clippy
# for aarch64-apple-darwin, zig compiling the C of ring and libgit2).
set -eu
ZIG_VERSION=0.14.1
ZIGBUILD_VERSION=0.24.0
venv="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-release/zigbuild-$ZIGBUILD_VERSION-zig-$ZIG_VERSION"
if [ ! -f "$venv/.done" ]; then
  echo "install-zigbuild: installing cargo-zigbuild==$ZIGBUILD_VERSION and ziglang==$ZIG_VERSION from PyPI into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet "cargo-zigbuild==$ZIGBUILD_VERSION" "ziglang==$ZIG_VERSION" >&2
  touch "$venv/.done"
fi
echo "$venv/bin"
