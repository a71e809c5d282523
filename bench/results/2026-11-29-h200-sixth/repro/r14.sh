#!/usr/bin/env bash
# Device call 14 (2026-11-29, sixth run): the executor's shared-work copy against memcpy and theseus_ref_dyn
# over the same buffers (each case's own World), at 32 KiB, 256 KiB and 1 MiB units.
set -uo pipefail
D=$PWD/.device; R=$OUT/r14; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok)|BWS|mismatch" $R/$n.txt | head -40; }
s sharing 150 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=32768,262144,1048576 -bw.align=256 -bw.refs=$D/bw/refs
