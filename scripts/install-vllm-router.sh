#!/usr/bin/env sh
# Install vLLM's router (PyPI vllm-router, pinned) into a venv under
# ~/.cache (once) and print the path of its launcher. Tests find it through
# LOCALAGENTS_VLLM_ROUTER. The wheel carries the router's Rust binary, so
# no compiler is needed.
set -eu
VERSION="${VLLM_ROUTER_VERSION:-0.1.17}"
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
