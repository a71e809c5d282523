#!/usr/bin/env bash
# Device call 10 of 2026-11-29 (fifth run): shared work without local-memory traffic in its loop.
set -uo pipefail
D=$PWD/.device; R=$OUT/r10; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|DIFF|BWS|mismatch" $R/$n.txt | head -40; }
s sharing 60 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=65536,1048576 -bw.align=256 -test.v
s diff-bw 120 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full -test.v
