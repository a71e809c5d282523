# common.sh — sourced by the GPU acceptance scripts in ncclabi/gpu/.
# Nothing here fetches anything. Variables (all optional):
#   THESEUS_PREFIX   installed Theseus NCCL (default build/prefix; built with
#                    `make -C ncclabi install` when missing and Go is present)
#   RESULTS          where results go (default $OUT when the device tool
#                    sets it, else build/gpu-results)
#   FALLBACK_NCCL    a real NCCL to use as THESEUS_NCCL_LIB_PATH (off by
#                    default: NCCL refuses several ranks on one GPU, so on
#                    one GPU under MPS its shadow communicator cannot form)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PREFIX=${THESEUS_PREFIX:-$ROOT/build/prefix}
RESULTS=${RESULTS:-${OUT:-$ROOT/build/gpu-results}}
mkdir -p "$RESULTS"

need_prefix() {
  if [ ! -e "$PREFIX/lib/libtheseus_nccl.so" ] || [ ! -e "$PREFIX/lib/libtheseus_audit_nccl.so" ]; then
    if command -v go >/dev/null 2>&1; then
      make -C "$ROOT/ncclabi" install-shared PREFIX="$PREFIX"
    else
      echo "no $PREFIX/lib/libtheseus_nccl.so and no Go here: where Go is, run" >&2
      echo "  make -C ncclabi install-shared PREFIX=\$PWD/build/prefix" >&2
      echo "and carry build/prefix to this machine" >&2
      exit 2
    fi
  fi
}

# Theseus's environment for the GPU runs: the CUDA backend, several ranks
# on one GPU (processes under MPS), the repository's default selection
# context, NCCL-style logs that name the schedule serving every call.
theseus_env() {
  export THESEUS_BACKEND=cuda
  export THESEUS_ALLOW_SHARED_DEVICE=1
  export THESEUS_SELECTION_CONTEXT=${THESEUS_SELECTION_CONTEXT:-$ROOT/examples/contexts/default}
  export THESEUS_DEBUG=${THESEUS_DEBUG:-INFO}
  export THESEUS_DEBUG_SUBSYS=${THESEUS_DEBUG_SUBSYS:-INIT,COLL}
  export THESEUS_TIMEOUT=${THESEUS_TIMEOUT:-60000}
  export GODEBUG=${GODEBUG:-asyncpreemptoff=1}
  export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
  if [ -n "${FALLBACK_NCCL:-}" ]; then
    export THESEUS_NCCL_LIB_PATH=$FALLBACK_NCCL
  else
    unset THESEUS_NCCL_LIB_PATH
  fi
}

MPS_STARTED=0
start_mps() {
  export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/theseus-mps-pipe}
  export CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/theseus-mps-log}
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  # A daemon already answering on this pipe (bench/gpu/run-all.sh starts one
  # before the clients) serves the ranks; this script then leaves it running.
  if echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
    echo "MPS already running (pipe $CUDA_MPS_PIPE_DIRECTORY)"
  elif nvidia-cuda-mps-control -d; then
    MPS_STARTED=1
    echo "MPS started (pipe $CUDA_MPS_PIPE_DIRECTORY)"
  else
    echo "warning: nvidia-cuda-mps-control -d failed; ranks share the GPU by time slicing" >&2
  fi
}

stop_mps() {
  if [ "$MPS_STARTED" = 1 ]; then
    echo quit | nvidia-cuda-mps-control || true
    MPS_STARTED=0
  fi
}

# The library a process really loaded (from /proc/PID/maps), to show that
# Theseus, not NVIDIA's NCCL, served it.
loaded_nccl() {
  grep -Eo '/[^ ]*(libtheseus_nccl|libnccl)[^ ]*' "/proc/$1/maps" | sort -u || true
}

# run_pair OUT PROG: runs "PROG 0 2" and "PROG 1 2 ID" (the ctest
# programs' convention: rank 0 prints "ID <hex>" first), each bounded to
# 120 s, their output in OUT.0 and OUT.1; returns non-zero when either
# fails or rank 0 prints no id within 60 s.
run_pair() {
  local out=$1 prog=$2
  timeout 120 "$prog" 0 2 >"$out.0" 2>&1 &
  local p0=$! id=
  for _ in $(seq 600); do
    id=$(sed -n 's/^ID //p' "$out.0")
    [ -n "$id" ] && break
    kill -0 $p0 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$id" ]; then
    echo "rank 0 printed no id:"
    cat "$out.0"
    kill $p0 2>/dev/null
    wait $p0
    return 1
  fi
  timeout 120 "$prog" 1 2 "$id" >"$out.1" 2>&1
  local rc1=$?
  wait $p0
  local rc0=$?
  echo "rc $rc0/$rc1"
  [ "$rc0" = 0 ] && [ "$rc1" = 0 ]
}
