#!/usr/bin/env bash
# Device call 62 (2026-11-30, tenth run): after the review's fixes (7c56177: entries of one
# schedule per record; poison kept until the backend refills). replay_check, callbench (same,
# cycle), nccl-tests with INIT-only logs (6 collectives, 2 and 4 ranks, LD_LIBRARY_PATH and
# LD_AUDIT), theseus-bench through MPS, and the CUDA graph and runtime tests.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r62; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 THESEUS_PREFIX=$D/prefix
T0=$(date +%s)
(cp $D/build_nccl_tests.sh ncclabi/gpu/ && bash ncclabi/gpu/build_nccl_tests.sh) > $R/nccl-tests-build.txt 2>&1 &
B=$!
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|^(REPLAYCHECK|  HOST|  CHECK|  FAIL|  destroyed)|GRAPH|RUNTIME" $R/$n.txt | sort | uniq -c | head -40; }
s replay-check 200 bash ncclabi/gpu/run_replay_check.sh
s callbench 120 env ROUNDS=3 bash ncclabi/gpu/run_callbench.sh
wait $B; tail -1 $R/nccl-tests-build.txt
s nccl-tests-init 300 env RESULTS=$R/init THESEUS_DEBUG_SUBSYS=INIT SIZES="-b 8 -e 4M -f 8" ITERS="-n 100 -w 5" bash ncclabi/gpu/run_nccl_tests.sh
grep -E "^\|" $R/init/nccl-tests/summary.md 2>/dev/null | head -30
rm -rf $R/init/nccl-tests/logs
s graph 90 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives' -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r62.tgz r62 && rm -rf r62
