#!/usr/bin/env sh
# Take the screenshots of `localagents ui` that docs/ shows (docs/ui/*.png):
# runs the page test in a real headless Chromium (Debian's chromium) with
# LOCALAGENTS_UI_SHOTS pointing at docs/ui.
set -eu
cd "$(dirname "$0")/.."
LOCALAGENTS_CLAUDE="${LOCALAGENTS_CLAUDE:-$(scripts/install-claude.sh)}"
export LOCALAGENTS_CLAUDE
PATH="$(scripts/install-nextest.sh):$PATH"
export PATH
mkdir -p docs/ui
LOCALAGENTS_UI_SHOTS="$PWD/docs/ui" cargo nextest run --locked -E 'test(=ui::ui_pages_show_a_real_job_its_requests_and_the_savings_in_a_real_browser)'
echo "ui-screenshots: docs/ui/ updated; review with git status docs/ui" >&2
