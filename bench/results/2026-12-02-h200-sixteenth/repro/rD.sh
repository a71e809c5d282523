#!/usr/bin/env bash
# Device call D (carry .device/f, third_party): where 2 nodes x 1 rank spend their time with
# kernel staging (call C: 2x1 all_reduce 1.5 GB/s busbw against NCCL's 3.7, with 1 lane or 4;
# 512 KiB 2.3 ms against 0.31): 2x1 tcp all_reduce at 512 KiB, 8 MiB and 32 MiB one size a run
# (the proxy's counters per connection: execution, direct puts, fences, signals, UCX progress),
# traces (THESEUS_TRACE) at 512 KiB and 8 MiB, and at 32 MiB THESEUS_SLICE_BYTES 256K / 4M and
# UCX's TCP socket buffers at 16 MiB.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
tar xJf $D/f/dev.txz -C $D
mkdir -p $D/nccl-bin && tar xJf $D/f/nccl-bin.txz -C $D/nccl-bin
W=/tmp/rD; mkdir -p $W /tmp/trace
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
left() { echo $(( ${LIMIT:-400} - ($(date +%s) - T0) )); }
nodes() { # nodes NAME DEADLINE VAR=VALUE...: one run-nodes.sh, results under $W/NAME
  local n=$1 dl=$2; shift 2
  local l=$(left); [ $l -lt 30 ] && { echo "== $n skipped"; return; }; [ $dl -gt $l ] && dl=$l
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  env "$@" OUT=$W RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh theseus > $W/$n.log 2>&1
  echo "rc=$?"; grep -E "^   rc=|skipped" $W/$n.log | head -4
  grep -h "^ *[0-9]\+ \+[0-9]\+ \+float" /tmp/nodes-results.*/runs/*.txt 2>/dev/null | awk -v n=$n '{print "ROW", n, $1, $6, $8}'
  grep -h "connection closed" /tmp/nodes-results.*/logs/* 2>/dev/null | sed "s/^/$n: /" | cut -c1-600 >> $W/closed.txt
  mkdir -p $W/runs-$n; cp /tmp/nodes-results.*/runs/*.txt $W/runs-$n/ 2>/dev/null; rm -rf /tmp/nodes-results.*
}
A="LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce"
nodes d512k 30 $A NT_SIZES="-b 512K -e 512K" NT_ITERS="-n 20 -w 5"
nodes d8m 30 $A NT_SIZES="-b 8M -e 8M" NT_ITERS="-n 20 -w 5"
nodes d32m 30 $A NT_SIZES="-b 32M -e 32M" NT_ITERS="-n 10 -w 3"
nodes t512k 30 $A NT_SIZES="-b 512K -e 512K" NT_ITERS="-n 3 -w 1" EXTRA_ENV="THESEUS_TRACE=/tmp/trace/t512k.%p.json"
nodes t8m 30 $A NT_SIZES="-b 8M -e 8M" NT_ITERS="-n 3 -w 1" EXTRA_ENV="THESEUS_TRACE=/tmp/trace/t8m.%p.json"
nodes s256k 30 $A NT_SIZES="-b 32M -e 32M" NT_ITERS="-n 10 -w 3" THESEUS_SLICE_BYTES=256K
nodes s4m 30 $A NT_SIZES="-b 32M -e 32M" NT_ITERS="-n 10 -w 3" THESEUS_SLICE_BYTES=4M
nodes sock16m 30 $A NT_SIZES="-b 32M -e 32M" NT_ITERS="-n 10 -w 3" UCX_TCP_SNDBUF=16M UCX_TCP_RCVBUF=16M
cut -c1-600 $W/closed.txt
cp -r /tmp/trace $W/
tar czf $OUT/rD.tgz -C /tmp rD
echo "== +$(( $(date +%s) - T0 ))s done"
