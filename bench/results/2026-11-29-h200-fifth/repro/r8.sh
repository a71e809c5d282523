#!/usr/bin/env bash
# Device call 8 of 2026-11-29 (fifth run): the unit counter's last-block reset, independent() refusing LL; after review.
set -uo pipefail
D=$PWD/.device; R=$OUT/r8; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|DIFF|BW best|BW memcpy|BWS|Benchmark|ERROR SUMMARY|mismatch" $R/$n.txt | head -60; }
s diff-bw 150 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full -test.v
s graph 60 $D/cuda.test -test.run TestGraph -test.v
s runtime 60 $D/cuda.test -test.run TestRuntimeCollectives -test.v
s sharing 60 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=1048576 -bw.align=0,256 -test.v
