#!/usr/bin/env sh
# Make `cargo nextest` work (the test runner of scripts/test.sh and
# scripts/e2e-real.sh) and print a directory to put first on PATH. If it
# works already, nothing is installed; otherwise the pinned cargo-nextest is
# built from crates.io with --locked into ~/.cache/localagents-ci/cargo-bin
# (once, a few minutes on 2 cores), where later runs find it.
set -eu
VERSION="${NEXTEST_VERSION:-0.9.143}"
ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-ci/cargo-bin"
PATH="$ROOT/bin:$PATH"
export PATH
if ! cargo nextest --version >/dev/null 2>&1; then
  echo "install-nextest: cargo install --locked cargo-nextest@$VERSION into $ROOT" >&2
  # Its own throwaway target dir: not the project's, nor CI's.
  tmp="$(mktemp -d)"
  CARGO_TARGET_DIR="$tmp" cargo install --locked --root "$ROOT" --version "$VERSION" cargo-nextest >&2 \
    || { rm -rf "$tmp"; echo "install-nextest: cargo install cargo-nextest failed" >&2; exit 1; }
  rm -rf "$tmp"
  cargo nextest --version >/dev/null 2>&1 \
    || { echo "install-nextest: cargo nextest still does not run after the install into $ROOT" >&2; exit 1; }
fi
echo "$ROOT/bin"
