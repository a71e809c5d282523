#!/usr/bin/env bash
# Device call C (carry .device/f, third_party): kernel staging (the executor kernel copies what
# it puts from device memory into pinned host memory itself; THESEUS_PROXY_STAGING=kernel, the
# default) against the proxy's staging copies (=proxy), beside NCCL's socket transport, in one
# run: nccl-tests across 2 simulated nodes (bench/gpu/run-nodes.sh), 2x1 and 2x2, TCP with 1 and
# 4 lanes; the point-to-point tests across nodes; on one node, the GPU point-to-point tests and
# nccl-tests sendrecv and all_reduce (the kernel's copy_bytes is now shared with the engine).
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
tar xJf $D/f/dev.txz -C $D
mkdir -p $D/nccl-bin && tar xJf $D/f/nccl-bin.txz -C $D/nccl-bin
W=/tmp/rC; mkdir -p $W
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - T0) )); }
nodes() { # nodes NAME DEADLINE VAR=VALUE...: one run-nodes.sh, results under $W/NAME
  local n=$1 dl=$2; shift 2
  local l=$(left); [ $l -lt 30 ] && { echo "== $n skipped"; return; }; [ $dl -gt $l ] && dl=$l
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  env "$@" OUT=$W RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh ${STEPS_:-theseus} > $W/$n.log 2>&1
  echo "rc=$?"; grep -E "^   rc=|skipped" $W/$n.log | head -20
  grep -h "connection closed" /tmp/nodes-results.*/logs/* 2>/dev/null | sed "s/^/$n: /" | cut -c1-420 >> $W/closed.txt; rm -rf /tmp/nodes-results.*/logs
}
STEPS_="nccl" nodes nccl 100 LAYOUTS="2x1 2x2" TESTS="all_reduce all_gather reduce_scatter"
nodes k2x1 100 LAYOUTS=2x1 TRANSPORTS="tcp tcp-l4" TESTS="all_reduce all_gather reduce_scatter"
nodes p2x1 40 LAYOUTS=2x1 TRANSPORTS="tcp" TESTS="all_reduce" THESEUS_PROXY_STAGING=proxy EXTRA_ENV=THESEUS_PROXY_STAGING=proxy
nodes k2x2 100 LAYOUTS=2x2 TRANSPORTS="tcp tcp-l4" TESTS="all_reduce all_gather reduce_scatter"
nodes kp2p 60 LAYOUTS="2x1 2x2" TRANSPORTS="tcp" TESTS="alltoall sendrecv" NT_SIZES="-b 8 -e 8M -f 8"
echo "== +$(( $(date +%s) - T0 ))s gpu tests"
(cd $W && timeout 90 $D/cuda.test -test.run 'TestP2P' -test.v > $W/gputests.txt 2>&1; echo "rc=$?" >> $W/gputests.txt)
grep -E "^(--- |ok|FAIL|PASS)|rc=" $W/gputests.txt | sort | uniq -c | head -20
echo "== +$(( $(date +%s) - T0 ))s one node"
mkdir -p $W/onenode
(NCCL_TESTS_BUILD=$D/nccl-bin/nccl-tests THESEUS_PREFIX=$D/prefix RESULTS=$W/onenode SIZES="-b 8 -e 64M -f 8" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS="sendrecv all_reduce" \
  timeout 120 bash ncclabi/gpu/run_nccl_tests.sh > $W/onenode/log.txt 2>&1; echo "rc=$?" >> $W/onenode/log.txt)
tail -3 $W/onenode/log.txt
cat $W/closed.txt | head -30
cp -r /tmp/nodes-results.* $W/ 2>/dev/null
tar czf $OUT/rC.tgz -C /tmp rC
echo "== +$(( $(date +%s) - T0 ))s done"
