#!/usr/bin/env bash
# Device call 5 of 2026-11-29 (fifth run): chunk alignment x shared work, host time after the cgo-cast fix, smoke tests
set -uo pipefail
D=$PWD/.device; R=$OUT/r5; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|DIFF|BW best|BW memcpy|BWS|Benchmark|ERROR SUMMARY|mismatch" $R/$n.txt | head -60; }
s callhost 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
s callhost-parts 90 $D/cuda.test -test.run xxx -test.bench 'CallHostParts|CallHostPaced' -test.benchtime 20000x -test.count 3 -callhost.parts
s hostcalls 30 $D/driver.test -test.run xxx -test.bench HostCalls
s sharing 180 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=1048576 -bw.align=0,256,512,4096,65536 -test.v
s graph 120 $D/cuda.test -test.run TestGraph -test.v
s runtime 90 $D/cuda.test -test.run TestRuntimeCollectives -test.v
