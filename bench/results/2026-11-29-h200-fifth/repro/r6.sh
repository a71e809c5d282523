#!/usr/bin/env bash
# Device call 6 of 2026-11-29 (fifth run): shared work with the plain tile loop; bandwidth; differential
set -uo pipefail
D=$PWD/.device; R=$OUT/r6; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|DIFF|BW best|BW memcpy|BWS|Benchmark|ERROR SUMMARY|mismatch" $R/$n.txt | head -60; }
s diff-bw 120 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full -test.v
s sharing 180 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=65536,262144,1048576 -bw.align=0,256 -test.v
s bandwidth 200 $D/cuda.test -test.run TestBandwidth$ -bw -test.v
s runtime 90 $D/cuda.test -test.run TestRuntimeCollectives -test.v
s diff-corpus 120 $D/cuda.test -test.run 'TestDifferential/programs/corpus' -diff.corpus=$D/corpus -test.v
