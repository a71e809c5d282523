#!/usr/bin/env bash
# small-messages.sh — issue 25's first GPU check (items 1, 2 and 5: the trace,
# cheap new buffers, the crossover sweep) on ONE H200, about 4 minutes.
#
#   (here)   OLD_PTX=$(git merge-base HEAD main) bash bench/gpu/prepare.sh
#            (the branch point's embedded modules in .device/old-ptx: the kernel
#            before the trace's per-op test, for the "cost is nil" comparison)
#            and, for nccl-tests, NVIDIA's source in third_party/nccl-tests and the
#            lead's build script in .device/build_nccl_tests.sh (as run-all.sh).
#   (device, carry .device and third_party) bash bench/gpu/small-messages.sh
#
# Everything lands in $OUT/small-messages.tgz (steps.txt summarises), plus the
# trace of a 2-rank allreduce as $OUT/trace-cuda-2rank.json and its drawing
# $OUT/trace-cuda-2rank.png (outside the archive, to open directly).
#
# Success:
#   - tests rc=0: TestKernelModules (three entry points), TestShiftedBuffers
#     ("SHIFT eager/graph ... wrong=0", rebases ~ positions-1), TestTraceGPU
#     ("TRACE gpu ... outside-call-max" a few µs at most), TestGraph;
#   - latency: BenchmarkLatency us/call of "new" (trace off) within the
#     run-to-run spread of "old" (the branch point's kernel): the trace's test
#     per op costs nothing; "traced" shows what tracing costs; <size>/shift
#     close to <size>/eager with rebases/call ~1 and setups/call 0 (a new pair
#     of buffers costs a repeat plus a small constant);
#   - nccl-tests all_reduce_perf 2 ranks under MPS, 8 B – 64 KiB: the NT lines
#     print eager (-G 0) and graph (-G 1) time per size and their ratio; goal
#     <= 1.3 at every size (it was 3.9 at 8 B: known issue 19);
#   - the sweep: sweep-allreduce.txt (the table for docs/crossovers.md) and
#     .json, "# Wrong elements: 0"; the other collectives' (in process) in
#     sweep-others.*.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/small-messages.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL"
PACK=small-messages.tgz
SUMMARY="^(--- FAIL|FAIL|ok|PASS)|panic|^(TRACE|SHIFT|GRAPH|KERNEL|NT )|^Benchmark|Wrong elements|Findings|ll_max_bytes|Fastest by size"
# shellcheck source=bench/gpu/steps.sh
source "$ROOT/bench/gpu/steps.sh"
trap pack EXIT
export NCCL_NVLS_ENABLE=0 GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
DEADLINE=${DEADLINE:-420}
# PARTS: which parts run (default all): tests (1), latency (2), trace (3), nccl (4's
# nccl-tests), sweep (4's sweeps).
PARTS=${PARTS:-tests latency trace nccl sweep}
part() { [[ " $PARTS " == *" $1 "* ]]; }
C=$D/cuda.test
TB=$D/theseus-bench
OLD=$D/old-ptx
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?'), old modules: $(cat "$OLD/COMMIT" 2>/dev/null || echo 'none')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"

# 0. nccl-tests, built in the background against our nccl.h (CPU only), as run-all.sh does.
NT=$ROOT/build/nccl-tests
if [ ! -x "$NT/all_reduce_perf" ] && [ -f "$ROOT/third_party/nccl-tests/src/common.cu" ] && [ -f "$D/build_nccl_tests.sh" ]; then
  (cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
    THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/nccl-tests-build.txt" 2>&1 &
  NT_BUILD=$!
fi
# ptxas's registers and spills of the old and new float32 modules (the trace's cost in code).
(for m in "$ROOT/cuda/kernel/ptx/theseus_float32.ptx" "$OLD/theseus_float32.ptx"; do
   [ -f "$m" ] || continue
   echo "== $m"; ptxas -arch=sm_90 -O3 -v "$m" -o /dev/null 2>&1 | grep -E "Compiling entry|Used|spill" | head -12
 done) >"$R/ptxas.txt" 2>&1 &

# 1. Behaviour: the modules (JIT), buffers moved within their allocations (eager and in a
#    graph), the GPU trace and its clock mapping, graph capture with the new L3 path.
if part tests; then
  step modules 150 "$C" -test.run 'TestKernelModules|TestModuleLoad' -test.v
  step tests 120 "$C" -test.run 'TestShiftedBuffers|TestTraceGPU|TestGraph' -test.v
fi

# 2. Latency, trace off (new kernel, and the old one when carried) and on, interleaved:
#    <size>/eager, <size>/shift (new buffers every call), <size>/graph.
for k in 1 2; do
  part latency || break
  step latency-new-$k 40 "$C" -test.run xxx -test.bench Latency -test.benchtime 1000x
  if [ -f "$OLD/theseus_float32.ptx" ]; then
    step latency-old-$k 40 env THESEUS_PTX_DIR="$OLD" "$C" -test.run xxx -test.bench Latency -test.benchtime 1000x
  fi
  step latency-traced-$k 40 env THESEUS_TRACE="$R/latency-trace-$k.json" THESEUS_TRACE_OPS=1048576 "$C" -test.run xxx -test.bench Latency -test.benchtime 1000x
done
rm -f "$R"/latency-trace-*.json # large; the allreduce trace below is the one to keep

# 3. The trace of a 2-rank allreduce through theseus-bench (in process, one GPU), drawn.
part trace && step trace 60 "$TB" --backend cuda --nranks 2 --coll allreduce -b 8 -e 32K -f 64 -n 20 -w 5 --hotswap=false \
  --trace "$R/trace-cuda-2rank.json"
part trace && step trace-plot 20 "$TB" trace-plot "$R/trace-cuda-2rank.json" "$R/trace-cuda-2rank.png" --calls 2 --call "allreduce 8 B"
"$TB" trace-plot "$R/trace-cuda-2rank.json" "$R/trace-cuda-2rank-32k.png" --calls 2 --call "allreduce 32768 B" >/dev/null 2>&1
cp "$R/trace-cuda-2rank.json" "$R/trace-cuda-2rank.png" "$FINAL/" 2>/dev/null

# 4. Under MPS: nccl-tests all_reduce_perf eager (-G 0) and graph (-G 1), 2 ranks, 8 B – 64 KiB;
#    then the sweep as 2 processes.
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && log "MPS started"
if [ -n "${NT_BUILD:-}" ]; then wait "$NT_BUILD"; log "nccl-tests built: $(ls "$NT" 2>/dev/null | wc -l) files"; fi
if ! part nccl; then
  :
elif [ -x "$NT/all_reduce_perf" ]; then
  export THESEUS_PREFIX=$D/prefix
  for g in 0 1; do
    step nccl-g$g 60 env RESULTS="$R/nccl-g$g" SIZES="-b 8 -e 64K -f 2" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath \
      TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash "$ROOT/ncclabi/gpu/run_nccl_tests.sh"
  done
  # One eager run traced (a file per process), to see where an eager small call's time goes.
  step nccl-traced 45 env RESULTS="$R/nccl-traced" SIZES="-b 8 -e 32K -f 64" ITERS="-n 20 -w 5 -G 0" NRANKS=2 MODES=ldpath \
    TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT THESEUS_TRACE="$R/nccl-trace.%p.json" bash "$ROOT/ncclabi/gpu/run_nccl_tests.sh"
  "$TB" trace-merge "$R/nccl-trace.json" "$R"/nccl-trace.*.json >/dev/null 2>&1 && rm -f "$R"/nccl-trace.*.json &&
    "$TB" trace-plot "$R/nccl-trace.json" "$R/nccl-trace-8B.png" --calls 3 --call "allreduce 8 B" >/dev/null 2>&1
  # Eager over graph per size: time is nccl-tests' column 6 (out of place) of each data row.
  awk 'FNR == 1 { g = (FILENAME ~ /nccl-g1/) }
       /^ *[0-9]+ +[0-9]+ +float/ { t[g, $1] = $6; sizes[$1] = 1 }
       END { for (s in sizes) if (t[0, s] > 0 && t[1, s] > 0) printf "NT %8d B eager %8.2f us graph %8.2f us ratio %.2f\n", s, t[0, s], t[1, s], t[0, s] / t[1, s] }' \
    "$R"/nccl-g0/nccl-tests/ldpath-n2-all_reduce.txt "$R"/nccl-g1/nccl-tests/ldpath-n2-all_reduce.txt 2>/dev/null | sort -k2 -n | tee "$R/nccl-ratio.txt" | tee -a "$R/steps.txt"
  pack
else
  log "no nccl-tests build: skipped (carry third_party/nccl-tests and .device/build_nccl_tests.sh)"
fi
# The sweep of every allreduce candidate, 2 processes under MPS (rank 0 prints).
write_sweep2() {
  cat >"$R/sweep2.sh" <<EOF
export THESEUS_ALLOW_SHARED_DEVICE=1
rm -f /tmp/sweep.id
for r in 1 0; do RANK=\$r WORLD_SIZE=2 "$TB" sweep --backend cuda --id-file /tmp/sweep.id "\$@" >"$R/sweep.\$r.out" 2>&1 & done
wait
cat "$R/sweep.0.out"
EOF
}
write_sweep2
part sweep && step sweep-allreduce 100 bash "$R/sweep2.sh" -b 8 -e 64M -f 2 --coll allreduce --save "$R/sweep-allreduce.json"
part sweep && step sweep-others 80 "$TB" sweep --backend cuda --nranks 2 -b 8 -e 16M -f 4 --coll allgather,reducescatter,alltoall,broadcast,reduce \
  --save "$R/sweep-others.json"
echo quit | nvidia-cuda-mps-control
wait
log done
