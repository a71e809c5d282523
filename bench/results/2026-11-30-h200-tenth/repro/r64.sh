#!/usr/bin/env bash
# Device call 64 (2026-11-30, tenth run), at 3449e57: PyTorch (torch_check.py, 2 and 4 ranks) with
# INIT-only logs, so that its repeated calls may be launched from C; nccl-tests with CUDA graphs
# (-G 5) and INIT-only logs, so that calls made while a stream is captured reach the C side, which
# must decline them.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r64; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 THESEUS_PREFIX=$D/prefix
T0=$(date +%s)
(cp $D/build_nccl_tests.sh ncclabi/gpu/ && bash ncclabi/gpu/build_nccl_tests.sh) > $R/nccl-tests-build.txt 2>&1 &
B=$!
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; }
s torch-init 200 env RESULTS=$R/torch-init THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_torch_check.sh
grep -E "^\|" $R/torch-init/torch/summary.md 2>/dev/null || tail -20 $R/torch-init.txt
grep -ho "destroyed: [0-9]* requests served natively ([0-9]* of them launched from C)" $R/torch-init/torch/*.txt 2>/dev/null | sort | uniq -c | head
wait $B; tail -1 $R/nccl-tests-build.txt
s nccl-tests-graph 200 env RESULTS=$R/graph THESEUS_DEBUG_SUBSYS=INIT MODES=ldpath NRANKS="2 4" TESTS="all_reduce all_gather broadcast" SIZES="-b 8 -e 1M -f 8" ITERS="-n 20 -w 5 -G 5" bash ncclabi/gpu/run_nccl_tests.sh
grep -E "^\|" $R/graph/nccl-tests/summary.md 2>/dev/null | head -10
grep -h "Graph\|graph" $R/graph/nccl-tests/ldpath-n2-all_reduce.txt | head -3
rm -rf $R/graph/nccl-tests/logs
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r64.tgz r64 && rm -rf r64
