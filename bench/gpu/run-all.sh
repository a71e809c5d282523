#!/usr/bin/env bash
# run-all.sh — every GPU acceptance run of issues 6 and 7 in ONE device call,
# most important first, each step bounded, results under $OUT (see
# bench/gpu/README.md). It builds nothing of ours (the GPU machine has no Go):
# carry the binaries this script expects, prepared on the development
# machine by bench/gpu/prepare.sh, in .device/.
#
#   (device) bash bench/gpu/run-all.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
OUT=${OUT:-$ROOT/build/gpu-results}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GODEBUG=asyncpreemptoff=1
log() { echo "== $(date -u +%H:%M:%S) $*" | tee -a "$OUT/steps.txt"; }
step() { # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  log "$name"
  timeout "$secs" "$@" >"$OUT/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc" | tee -a "$OUT/steps.txt"
  tail -5 "$OUT/$name.txt" | sed 's/^/   /'
}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

# 1. Driver bindings.
step driver 60 "$D/driver.test" -test.v
# 2. The kernel against the host interpreter, bit for bit (generators, corpus).
step differential 240 "$D/cuda.test" -test.run 'TestDifferential' -diff.corpus="$D/corpus" -diff.out="$OUT/differential-cases.txt" -test.v
# 3. Every collective through the runtime on the CUDA backend (4 in-process ranks).
step runtime 120 "$D/cuda.test" -test.run 'TestRuntimeCollectives' -test.v
# 4. Copy/reduce op bandwidth against the memcpy ceiling.
step bandwidth 120 "$D/cuda.test" -test.run 'TestBandwidth' -bw -test.v
# 5. Sanitizers on a 2-rank allreduce.
step memcheck 120 compute-sanitizer --tool memcheck "$D/cuda.test" -test.run 'TestDifferential/ring/allreduce/n2/simple$'
step racecheck 120 compute-sanitizer --tool racecheck "$D/cuda.test" -test.run 'TestDifferential/ring/allreduce/n2/simple$'
# 6. theseus-bench on the CUDA backend: in process, then 2 processes under MPS.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && log "MPS started"
step bench-cuda 180 "$D/theseus-bench" --backend cuda -e 256M
rm -f /tmp/tb.id
(export THESEUS_ALLOW_SHARED_DEVICE=1
 for r in 0 1; do RANK=$r WORLD_SIZE=2 "$D/theseus-bench" --backend cuda --id-file /tmp/tb.id -e 64M >"$OUT/bench-mp.$r.txt" 2>&1 & done; wait)
log "bench-mp"; tail -5 "$OUT/bench-mp.0.txt"
# 7. The NCCL library: nccl-tests (if built by the command line into build/nccl-tests) and PyTorch.
if [ -x "$ROOT/build/nccl-tests/all_reduce_perf" ]; then
  step nccl-tests 240 env RESULTS="$OUT" THESEUS_PREFIX="$D/prefix" bash "$ROOT/ncclabi/gpu/run_nccl_tests.sh"
fi
step torch 240 env RESULTS="$OUT" THESEUS_PREFIX="$D/prefix" bash "$ROOT/ncclabi/gpu/run_torch_check.sh"
echo quit | nvidia-cuda-mps-control
log "done"
