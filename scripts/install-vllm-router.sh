#!/usr/bin/env sh
# Install vLLM's router (PyPI vllm-router, pinned) into a venv under
# ~/.cache (once) and print the path of its launcher. Tests find it through
# LOCALAGENTS_VLLM_ROUTER. The wheel carries the router's Rust binary, so
# no compiler is needed.
# PyPI has wheels for Linux only (0.1.17: manylinux x86_64 and aarch64;
# besides, only a source archive). Elsewhere (macOS) nothing is installed:
# this prints nothing, says why on stderr and exits 0, so scripts/test.sh
# goes on, and the router's tests record that they are skipped
# (tests/support/src/vllm_router.rs), which scripts/test.sh lists at its end.
set -eu
VERSION="${VLLM_ROUTER_VERSION:-0.1.17}"
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64 | Linux/aarch64) ;;
  *)
    echo "install-vllm-router: vllm-router $VERSION has no wheel for $(uname -s) $(uname -m) on PyPI (Linux x86_64 and aarch64 only), so it is not installed and its tests will say they are skipped" >&2
    exit 0
    ;;
esac
VENV="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-e2e/vllm-router-$VERSION"
BIN="$VENV/bin/vllm-router"
if [ ! -f "$VENV/.done" ]; then
  PY="${PYTHON:-python3}"
  command -v "$PY" >/dev/null || { echo "install-vllm-router: $PY is missing; install Python 3.8+" >&2; exit 1; }
  echo "install-vllm-router: pip install vllm-router==$VERSION into $VENV" >&2
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --no-cache-dir "vllm-router==$VERSION" >&2
  touch "$VENV/.done"
fi
[ -x "$BIN" ] || { echo "install-vllm-router: $BIN is missing after pip install" >&2; exit 1; }
echo "$BIN"
