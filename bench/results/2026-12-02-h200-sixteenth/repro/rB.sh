#!/usr/bin/env bash
# Device call B (carry .device, third_party): where the proxy's time goes in the 10 ms of a
# Simple schedule across nodes (call A's trace: every threadblock's first put waits about
# 10 ms for its descriptor to complete). The proxy now counts its execution and staging
# time per connection (proxy.Stats, logged at close: "NET/UCX connection closed: ..."):
# 2x1 tcp all_reduce and all_gather at 512 KiB, copies batched and THESEUS_PROXY_STAGE_BATCH=0.
# Also returns the nccl-tests binaries (stripped, $OUT/nccl-bin.txz) for later calls.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
mkdir -p $OUT/r
nodes() { # nodes NAME DEADLINE VAR=VALUE...: one run-nodes.sh, its results under /tmp/rB/NAME
  local n=$1 dl=$2; shift 2
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  env "$@" OUT=/tmp/rB RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh ${STEPS_:-theseus} > /tmp/rB/$n.log 2>&1
  echo "rc=$?"; grep -E "^   rc=|skipped" /tmp/rB/$n.log | head -20
  grep -h "connection closed" /tmp/nodes-results.*/logs/* 2>/dev/null | sed "s/^/$n: /" >> /tmp/rB/closed.txt; rm -rf /tmp/nodes-results.*/logs
}
mkdir -p /tmp/rB
STEPS_="build" nodes build 200
(cd build && strip nccl-tests/*_perf nccl-tests-nccl/*_perf; tar cJf $OUT/nccl-bin.txz nccl-tests/*_perf nccl-tests/minimpi nccl-tests-nccl/*_perf nccl-tests-nccl/minimpi nccl-tests-nccl/nccl-home); ls -la $OUT
for t in all_reduce all_gather; do
  nodes $t-batch 40 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=$t NT_SIZES="-b 512K -e 512K"
  nodes $t-nobatch 40 LAYOUTS=2x1 TRANSPORTS=tcp-nobatch TESTS=$t NT_SIZES="-b 512K -e 512K"
done
cat /tmp/rB/closed.txt | cut -c1-400 | head -40
tar czf $OUT/rB.tgz -C /tmp rB
echo "== +$(( $(date +%s) - T0 ))s done"
