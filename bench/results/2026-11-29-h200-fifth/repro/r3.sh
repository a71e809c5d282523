#!/usr/bin/env bash
# Device call 3 of 2026-11-29 (fifth run): shared work (64 KiB units), bandwidth, differential, 4 kHz host-time profile
set -uo pipefail
D=$PWD/.device; R=$OUT/r3; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|DIFF|BW best|BW memcpy|BWS|Benchmark|ERROR SUMMARY|mismatch" $R/$n.txt | head -60; }
s diff-bw 120 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full -test.v
s bandwidth 200 $D/cuda.test -test.run TestBandwidth -bw -test.v
s graph 150 $D/cuda.test -test.run TestGraph -test.v
s runtime 90 $D/cuda.test -test.run TestRuntimeCollectives -test.v
s callhost 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3 -callhost.prof $R/callhost.prof
s diff-generators 200 $D/cuda.test -test.run TestDifferential -diff.sample=41 -diff.corpus=/nonexistent -test.v
