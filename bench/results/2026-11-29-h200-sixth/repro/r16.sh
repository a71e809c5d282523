#!/usr/bin/env bash
# Device call 16 (2026-11-29, sixth run): the full kernel suite at the final kernel (64 KiB units, the units
# loop inlined into theseus_units), with ref-dyn and memcpy over each copy's own buffers.
set -uo pipefail
D=$PWD/.device; R=$OUT/r16; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt 2>&1
DEADLINE=480 OUT=$R bash bench/gpu/run-all.sh kernel > $R/run-all.txt 2>&1; echo "run-all rc=$?"; grep -E "^==|rc=|BW best|GRAPH|RUNTIME|DIFF|Benchmark|ERROR SUMMARY|FAIL|LAT " $R/run-all.txt | head -90
