#!/usr/bin/env sh
# Run every test. Provisions what the tests need (the pinned Claude Code CLI
# from npm, cached under ~/.cache), then runs the whole cargo test suite.
set -eu
cd "$(dirname "$0")/.."
LOCALAGENTS_CLAUDE="$(scripts/install-claude.sh)"
export LOCALAGENTS_CLAUDE
"$LOCALAGENTS_CLAUDE" --version >&2
cargo test --locked "$@"
