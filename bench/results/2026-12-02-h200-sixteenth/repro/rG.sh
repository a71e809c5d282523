#!/usr/bin/env bash
# Device call G (carry .device/f, third_party): call F's one failure, nccl-tests alltoall at 2x2
# (ncclRemoteError at the first size), again with every rank's log kept: three times with the
# defaults, once with THESEUS_PROXY_STAGING=proxy, once with one lane; 8 B - 1 MiB.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
tar xJf $D/f/dev.txz -C $D
mkdir -p $D/nccl-bin && tar xJf $D/f/nccl-bin.txz -C $D/nccl-bin
W=/tmp/rG; mkdir -p $W
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
nodes() {
  local n=$1 dl=$2; shift 2
  echo "== +$(( $(date +%s) - T0 ))s $n"
  env "$@" OUT=$W RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh theseus > $W/$n.log 2>&1
  grep -E "^   rc=" $W/$n.log | cut -c1-60
  mkdir -p $W/$n-res; cp -r /tmp/nodes-results.*/runs /tmp/nodes-results.*/logs $W/$n-res/ 2>/dev/null; rm -rf /tmp/nodes-results.*
  grep -h "WARN\|rror" $W/$n-res/logs/* 2>/dev/null | cut -c1-400 | head -8
}
A="LAYOUTS=2x2 TESTS=alltoall NT_SIZES=-b8 NT_ITERS=-n5"
for k in 1 2 3; do nodes def$k 40 LAYOUTS=2x2 TRANSPORTS=tcp TESTS=alltoall NT_SIZES="-b 8 -e 1M -f 8" NT_ITERS="-n 5 -w 2"; done
nodes proxy 40 LAYOUTS=2x2 TRANSPORTS=tcp TESTS=alltoall NT_SIZES="-b 8 -e 1M -f 8" NT_ITERS="-n 5 -w 2" EXTRA_ENV=THESEUS_PROXY_STAGING=proxy
nodes l1 40 LAYOUTS=2x2 TRANSPORTS=tcp-l1 TESTS=alltoall NT_SIZES="-b 8 -e 1M -f 8" NT_ITERS="-n 5 -w 2"
tar czf $OUT/rG.tgz -C /tmp rG
echo "== +$(( $(date +%s) - T0 ))s done"
