#!/usr/bin/env bash
# Device call H (carry .device/f, third_party): 2x2 alltoall hangs from its first call (nccl-tests'
# warm-up at 128 MiB) with the defaults (call G2, three of three); at 1 MiB it passes (call G).
# Which change: the point-to-point copy in mapped host memory, or the auto lanes (2 at 2x2)?
# Each run bounded at 20 s (sizes 8 B - 128 MiB, factor 64): defaults; THESEUS_PROXY_LANES=1;
# THESEUS_PROXY_STAGING=proxy.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
tar xJf $D/f/dev.txz -C $D
mkdir -p $D/nccl-bin && tar xJf $D/f/nccl-bin.txz -C $D/nccl-bin
W=/tmp/rH; mkdir -p $W
export GODEBUG=asyncpreemptoff=1 NCCL_NVLS_ENABLE=0
run() { local n=$1; shift
  echo "== +$(( $(date +%s) - T0 ))s $n"
  env "$@" OUT=$W RESULTS=$n DEADLINE=20 LAYOUTS=2x2 TRANSPORTS=tcp TESTS=alltoall NT_SIZES="-b 8 -e 128M -f 64" NT_ITERS="-n 3 -w 1" timeout 30 bash bench/gpu/run-nodes.sh theseus > $W/$n.log 2>&1
  grep -E "^   rc=" $W/$n.log | cut -c1-60
  mkdir -p $W/$n-res; cp -r /tmp/nodes-results.*/runs /tmp/nodes-results.*/logs $W/$n-res/ 2>/dev/null; rm -rf /tmp/nodes-results.*
}
run def EXTRA_ENV=THESEUS_TIMEOUT=8000
run lanes1 EXTRA_ENV="THESEUS_PROXY_LANES=1 THESEUS_TIMEOUT=8000"
run proxy EXTRA_ENV="THESEUS_PROXY_STAGING=proxy THESEUS_TIMEOUT=8000"
tar czf $OUT/rH.tgz -C /tmp rH
echo "== +$(( $(date +%s) - T0 ))s done"
