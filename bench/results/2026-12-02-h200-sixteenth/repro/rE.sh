#!/usr/bin/env bash
# Device call E (carry .device/f, third_party): lanes that spread (laneOf = min(c, c') mod N;
# before, (c + c') mod N put the generators' channels, c paired with c, on the even lanes only)
# with kernel staging: nccl-tests across 2 simulated nodes, 2x1 and 2x2, TCP with 1, 2, 4 and 8
# lanes, beside NCCL's socket transport in the same call; point-to-point across nodes (alltoall,
# sendrecv) with 4 lanes.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
tar xJf $D/f/dev.txz -C $D
mkdir -p $D/nccl-bin && tar xJf $D/f/nccl-bin.txz -C $D/nccl-bin
W=/tmp/rE; mkdir -p $W
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
left() { echo $(( ${LIMIT:-540} - ($(date +%s) - T0) )); }
nodes() { # nodes NAME DEADLINE VAR=VALUE...: one run-nodes.sh, results under $W/NAME
  local n=$1 dl=$2; shift 2
  local l=$(left); [ $l -lt 30 ] && { echo "== $n skipped"; return; }; [ $dl -gt $l ] && dl=$l
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  env "$@" OUT=$W RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh ${STEPS_:-theseus} > $W/$n.log 2>&1
  echo "rc=$?"; grep -E "^   rc=|skipped" $W/$n.log | head -30
  grep -h "connection closed" /tmp/nodes-results.*/logs/* 2>/dev/null | sed "s/^/$n: /" | cut -c1-600 >> $W/closed.txt
  grep -h "port channels across nodes" /tmp/nodes-results.*/logs/* 2>/dev/null | head -1 >> $W/paths.txt
  mkdir -p $W/$n-res; cp -r /tmp/nodes-results.*/runs /tmp/nodes-results.*/summary.md $W/$n-res/ 2>/dev/null; rm -rf /tmp/nodes-results.*
}
T3="all_reduce all_gather reduce_scatter"
STEPS_=nccl nodes nccl 90 LAYOUTS="2x1 2x2" TESTS="$T3"
nodes lanes2x1 150 LAYOUTS=2x1 TRANSPORTS="tcp tcp-l2 tcp-l4 tcp-l8" TESTS="$T3"
nodes lanes2x2 170 LAYOUTS=2x2 TRANSPORTS="tcp tcp-l2 tcp-l4 tcp-l8" TESTS="$T3"
nodes p2p 60 LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l4" TESTS="alltoall sendrecv" NT_SIZES="-b 8 -e 8M -f 8"
for f in $W/*-res/summary.md; do grep -E "^\| (theseus|nccl) " $f; done | cut -d'|' -f2-9
tar czf $OUT/rE.tgz -C /tmp rE
echo "== +$(( $(date +%s) - T0 ))s done"
