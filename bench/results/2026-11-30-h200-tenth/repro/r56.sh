#!/usr/bin/env bash
# Device call 56 (2026-11-30, tenth run): replay from C (f74d6ee+). The first kernel load (JIT),
# then replay_check (3 settings), callbench through the NCCL ABI (replay on/off, 3 rounds),
# nccl-tests with INIT-only logs (so repeats are launched from C), and the CUDA graph and runtime
# tests (unchanged paths) as a guard.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r56; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
export THESEUS_PREFIX=$D/prefix RESULTS=$R
T0=$(date +%s)
(cp $D/build_nccl_tests.sh ncclabi/gpu/ && bash ncclabi/gpu/build_nccl_tests.sh) > $R/nccl-tests-build.txt 2>&1 &
B=$!
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|^(REPLAYCHECK|  HOST|  CHECK|  FAIL|  destroyed|replay=|==)|GRAPH|RUNTIME" $R/$n.txt | head -40; }
s jit 240 $D/cuda.test -test.run TestModuleLoad -test.v
s replay-check 150 bash ncclabi/gpu/run_replay_check.sh
s callbench 120 env ROUNDS=3 bash ncclabi/gpu/run_callbench.sh
wait $B; tail -2 $R/nccl-tests-build.txt
s nccl-tests 150 env THESEUS_DEBUG_SUBSYS=INIT MODES=ldpath NRANKS=2 TESTS="all_reduce all_gather broadcast reduce_scatter" SIZES="-b 8 -e 4M -f 8" ITERS="-n 200 -w 5" bash ncclabi/gpu/run_nccl_tests.sh
grep -E "^\|" $R/nccl-tests/summary.md 2>/dev/null | head -12
s graph 60 $D/cuda.test -test.run 'TestGraph' -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r56.tgz r56 && rm -rf r56
