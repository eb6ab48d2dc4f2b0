#!/usr/bin/env sh
# Regenerate the docs that are printed from the code: docs/reference/*.md
# (the CLI, the MCP tools, the config keys, the status object) and
# skills/local-agents/reference.md. It runs the test
# docs::the_references_are_generated with LOCALAGENTS_BLESS=1, which writes
# each file instead of comparing it (tests/it/docs.rs holds the generator).
# Review the result with git diff and commit it with the code change.
#
#   scripts/gen-docs.sh
set -eu
cd "$(dirname "$0")/.."
LOCALAGENTS_BLESS=1
export LOCALAGENTS_BLESS
# cargo-nextest where scripts/install-nextest.sh puts it, else cargo test.
PATH="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-ci/cargo-bin/bin:$PATH"
export PATH
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --locked -E 'test(=docs::the_references_are_generated)'
else
  cargo test --locked --test it -- --exact docs::the_references_are_generated
fi
echo "gen-docs: docs/reference/ and skills/local-agents/reference.md regenerated; review with git diff" >&2
