#!/usr/bin/env bash
# Device call 57 (2026-11-30, tenth run): replay from C with 16 entries (b9da30d). First the replay
# checks (replay_check: doubling, inputs, cycle, streams, polling; 3 settings), callbench through
# the NCCL ABI (same and cycle, replay on/off, 3 rounds) and nccl-tests with INIT-only logs (repeats
# launched from C); then the whole GPU suite (run-all.sh, INFO COLL logs: calls through Go).
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r57; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
T0=$(date +%s)
(cp $D/build_nccl_tests.sh ncclabi/gpu/ && THESEUS_PREFIX=$D/prefix bash ncclabi/gpu/build_nccl_tests.sh) > $R/nccl-tests-build.txt 2>&1 &
B=$!
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|^(REPLAYCHECK|  HOST|  CHECK.*FAIL|  FAIL|  destroyed|replay=|==)" $R/$n.txt | head -40; }
s replay-check 200 env THESEUS_PREFIX=$D/prefix bash ncclabi/gpu/run_replay_check.sh
s callbench 120 env THESEUS_PREFIX=$D/prefix ROUNDS=3 bash ncclabi/gpu/run_callbench.sh
wait $B; tail -1 $R/nccl-tests-build.txt
s nccl-tests-init 150 env THESEUS_PREFIX=$D/prefix RESULTS=$R/init THESEUS_DEBUG_SUBSYS=INIT MODES=ldpath NRANKS=2 TESTS="all_reduce all_gather broadcast reduce_scatter" SIZES="-b 8 -e 4M -f 8" ITERS="-n 200 -w 5" bash ncclabi/gpu/run_nccl_tests.sh
grep -E "^\|" $R/init/nccl-tests/summary.md 2>/dev/null | head -8
L=$(( 585 - ($(date +%s) - T0) ))
echo "== +$(( $(date +%s) - T0 ))s suite (deadline $L s)"
DEADLINE=$L bash bench/gpu/run-all.sh 2>&1 | tail -45
cp build/gpu-results.tgz $R/ 2>/dev/null
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r57.tgz r57 && rm -rf r57
