#!/usr/bin/env bash
# run-all.sh — the GPU acceptance runs of issues 6 and 7 in ONE device call,
# most important first, each step bounded, results packed into one file
# ($OUT/gpu-results.tgz: the device tool returns at most 8 files). It builds
# nothing of ours (the GPU machine has no Go): carry the binaries that
# bench/gpu/prepare.sh puts in .device/, and NVIDIA's nccl-tests source in
# third_party/nccl-tests (built here, in the background, with minimpi).
#
#   (device) bash bench/gpu/run-all.sh kernel   # steps 1-5, under 10 minutes
#   (device) bash bench/gpu/run-all.sh clients  # steps 6-7, under 10 minutes
#   (device) bash bench/gpu/run-all.sh p2p      # step 8 (issue 22's point-to-point
#                                               # engine, ncclabi/gpu/run_p2p.sh), about 5 minutes
#   (device) bash bench/gpu/run-all.sh          # all (over the 10-minute limit
#                                               # of one device call if every
#                                               # step runs to its bound)
#
# Lessons of the 2026-11-29 runs (bench/results/2026-11-29-h200-second):
# the first kernel load on a fresh machine JIT-compiles the PTX (about a
# minute; cached afterwards), so step 1 loads it once with a long bound;
# compute-sanitizer cannot run under MPS, so the sanitizers run before MPS
# starts; differential programs run one at a time (parallel Worlds starve
# each other's spinning threadblocks).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/gpu-results.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL"
PACK=gpu-results.tgz
SUMMARY="^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|LAT|BW best|BW memcpy|KERNEL|DIFF|RUNTIME|Benchmark)|Wrong elements|ERROR SUMMARY"
# shellcheck source=bench/gpu/steps.sh
source "$ROOT/bench/gpu/steps.sh"
trap pack EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
# Every step is cut to end by DEADLINE seconds after the start (the device
# call's limit is 600 s), and the results are packed after every step, so a
# call that runs out of time still returns what it measured.
DEADLINE=${DEADLINE:-570}
PART=${1:-all}
want() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  nvcc --version | tail -1
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"

# 0. nccl-tests, built in the background against our nccl.h (CPU only).
if { want clients || want p2p; } && [ -f "$ROOT/third_party/nccl-tests/src/common.cu" ] && [ -f "$D/build_nccl_tests.sh" ]; then
  (cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
    THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/nccl-tests-build.txt" 2>&1 &
fi
# 1. The first kernel load (JIT) and CUDA graph capture + 1000 replays.
if want kernel; then
# ptxas's view of the embedded modules (registers, spills, compile time), on the CPU, beside the GPU steps.
(for m in float32 bfloat16 fp8e4m3 float64; do
   echo "== $m"; /usr/bin/time -f "ptxas %e s" ptxas -arch=sm_90 -O3 -v "$ROOT/cuda/kernel/ptx/theseus_$m.ptx" -o /dev/null 2>&1 | grep -E "theseus_exec|theseus_units|Used|spill|ptxas [0-9.]+ s" | head -12
 done) >"$R/ptxas.txt" 2>&1 &
step jit 240 "$D/cuda.test" -test.run TestModuleLoad -test.v
step graph 120 "$D/cuda.test" -test.run TestGraph -test.v
# 2. Every collective through the runtime on the CUDA backend (4 ranks in one process).
step runtime 90 "$D/cuda.test" -test.run TestRuntimeCollectives -test.v
# 3. Timings, alone on the GPU: op bandwidth, host time per call, latency (Go benchmarks).
# The bandwidth benchmarks report GB/s and of-memcpy (the fraction of cuMemcpyDtoD's bandwidth);
# with the reference build (.device/bench/refs, bench/gpu/prepare.sh) each unsliced copy also
# reports the block-contiguous copy, memcpy and theseus_ref_dyn over its own buffers, and
# BenchmarkBandwidthRefs times the reference copies; -bw.variants adds BW_VARIANTS builds.
REFS=; [ -d "$D/bench/refs" ] && REFS="-bw.refs=$D/bench/refs"
step bandwidth 150 "$D/cuda.test" -test.run xxx -test.bench 'Bandwidth(Memcpy|Refs)?$' -test.benchtime 50x -bw.variants="$(ls -d "$D"/bw/* 2>/dev/null | paste -sd,)" $REFS
bwbest "$R/bandwidth.txt" >"$R/bandwidth-best.txt"; sed 's/^/   /' "$R/bandwidth-best.txt"
step callhost 45 "$D/cuda.test" -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
# Each call timed on its own (the distribution), and the same paced (a call every 40 µs: the
# launch never waits for a full queue, the thread never sleeps).
step callhost-dist 60 "$D/cuda.test" -test.run xxx -test.bench 'CallHostDist|CallHostPaced' -test.benchtime 20000x -test.count 3
step hostcalls 20 "$D/driver.test" -test.run xxx -test.bench HostCalls
# The same without the selector's epoch agreement (every 1000 calls by default).
step callhost-noepoch 30 env THESEUS_CONTEXT_CHECK_PERIOD=1000000000 "$D/cuda.test" -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
step latency 45 "$D/cuda.test" -test.run xxx -test.bench Latency -test.benchtime 1000x
# 4. Sanitizers on a 2-rank allreduce (before MPS: they cannot run under it).
step memcheck 60 compute-sanitizer --tool memcheck "$D/cuda.test" -test.run 'TestDifferential/programs/ring/allreduce/n2/simple$'
step racecheck 60 compute-sanitizer --tool racecheck "$D/cuda.test" -test.run 'TestDifferential/programs/ring/allreduce/n2/simple$'
# 5. The kernel against the host interpreter, bit for bit (generators, corpus).
#    The corpus first (every 7th case), then every generator program at 2, 4
#    and 8 ranks (every 21st case, plus every float32 sum case).
step diff-corpus 150 "$D/cuda.test" -test.run 'TestDifferential/programs/corpus' -diff.corpus="$D/corpus" -diff.out="$R/differential-cases.txt" -test.v
step diff-generators 300 "$D/cuda.test" -test.run TestDifferential -diff.sample=21 -diff.corpus=/nonexistent -diff.out="$R/differential-cases.txt" -test.v
fi
# 6. theseus-bench on the CUDA backend: in process, then 2 processes under MPS.
if want clients; then
step bench-cuda 150 "$D/theseus-bench" --backend cuda -e 256M
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && log "MPS started"
rm -f /tmp/tb.id
(export THESEUS_ALLOW_SHARED_DEVICE=1
 for r in 0 1; do RANK=$r WORLD_SIZE=2 timeout 150 "$D/theseus-bench" --backend cuda --id-file /tmp/tb.id -e 64M >"$R/bench-mps.$r.txt" 2>&1 & done; wait)
log "bench-mps"; tail -3 "$R/bench-mps.0.txt"
# 7. The NCCL library: nccl-tests and PyTorch (2 and 4 processes).
wait
export RESULTS=$R THESEUS_PREFIX=$D/prefix
if [ -x "$ROOT/build/nccl-tests/all_reduce_perf" ]; then
  step nccl-tests 240 env SIZES="-b 8 -e 64M -f 8" ITERS="-n 10 -w 3" bash "$ROOT/ncclabi/gpu/run_nccl_tests.sh"
fi
step torch 200 bash "$ROOT/ncclabi/gpu/run_torch_check.sh"
# Issue 26: shrink past a killed rank, native registration, buffers moving on one rank only.
step resilience 240 bash "$ROOT/ncclabi/gpu/run_resilience.sh"
echo quit | nvidia-cuda-mps-control
fi
# 8. Issue 22: the point-to-point engine (its GPU tests, nccl-tests' point-to-point tests, PyTorch, the figures).
if want p2p; then
wait # (nccl-tests' build)
export RESULTS=$R THESEUS_PREFIX=$D/prefix
step p2p 290 env DEADLINE=270 bash "$ROOT/ncclabi/gpu/run_p2p.sh"
fi
log "done"
