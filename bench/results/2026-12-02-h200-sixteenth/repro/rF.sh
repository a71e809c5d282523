#!/usr/bin/env bash
# Device call F (carry .device/f, third_party): the final build, defaults only (kernel staging,
# THESEUS_PROXY_LANES=0: 4 / the ranks per node), beside NCCL's socket transport in one run:
# nccl-tests all_reduce, all_gather, reduce_scatter, alltoall and sendrecv across 2 simulated
# nodes, 2x1 and 2x2, UCX over TCP on loopback; UCX's default transports (shared memory
# allowed, labelled) for all_reduce; the point-to-point engine's copy in mapped host memory
# against THESEUS_PROXY_STAGING=proxy (sendrecv 2x1); then the GPU tests TestGraph,
# TestRuntimeCollectives and TestP2P on one node.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
tar xJf $D/f/dev.txz -C $D
mkdir -p $D/nccl-bin && tar xJf $D/f/nccl-bin.txz -C $D/nccl-bin
W=/tmp/rF; mkdir -p $W
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
left() { echo $(( ${LIMIT:-560} - ($(date +%s) - T0) )); }
nodes() { # nodes NAME DEADLINE VAR=VALUE...: one run-nodes.sh, results under $W/NAME-res
  local n=$1 dl=$2; shift 2
  local l=$(left); [ $l -lt 30 ] && { echo "== $n skipped"; return; }; [ $dl -gt $l ] && dl=$l
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  env "$@" OUT=$W RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh ${STEPS_:-theseus} > $W/$n.log 2>&1
  echo "rc=$?"
  grep -h "connection closed" /tmp/nodes-results.*/logs/* 2>/dev/null | sed "s/^/$n: /" | cut -c1-600 >> $W/closed.txt
  grep -h "port channels across nodes\|lane(s)" /tmp/nodes-results.*/logs/* 2>/dev/null | sort -u | head -2 >> $W/paths.txt
  mkdir -p $W/$n-res; cp -r /tmp/nodes-results.*/runs /tmp/nodes-results.*/summary.md $W/$n-res/ 2>/dev/null; rm -rf /tmp/nodes-results.*
}
T5="all_reduce all_gather reduce_scatter alltoall sendrecv"
STEPS_=nccl nodes nccl 120 LAYOUTS="2x1 2x2" TESTS="$T5"
nodes th 180 LAYOUTS="2x1 2x2" TRANSPORTS="tcp" TESTS="$T5"
nodes thdef 40 LAYOUTS="2x1 2x2" TRANSPORTS="default" TESTS="all_reduce"
nodes p2pproxy 30 LAYOUTS="2x1" TRANSPORTS="tcp" TESTS="sendrecv" EXTRA_ENV=THESEUS_PROXY_STAGING=proxy
for f in $W/*-res/summary.md; do grep -E "^\| (theseus|nccl) " $f; done | cut -d'|' -f2-9
echo "== +$(( $(date +%s) - T0 ))s gpu tests"
(cd $W && timeout 150 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives|TestP2P' -test.v > $W/gputests.txt 2>&1; echo "rc=$?" >> $W/gputests.txt)
grep -E "^(--- |ok|FAIL|PASS)|rc=" $W/gputests.txt | sort | uniq -c | head -40
tar czf $OUT/rF.tgz -C /tmp rF
echo "== +$(( $(date +%s) - T0 ))s done"
