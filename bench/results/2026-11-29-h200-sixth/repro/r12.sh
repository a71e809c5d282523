#!/usr/bin/env bash
# Device call 12 (2026-11-29, sixth run): the kernel suite at c0b0eca+ (theseus_units with the unit taken a unit ahead),
# then the shared-work sweep (embedded and the THESEUS_UNIT_PREFETCH=0 variant), and the machine's CPU/THP facts.
set -uo pipefail
D=$PWD/.device; R=$OUT/r12; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor|L1d|L2|L3|NUMA node\(s\)"; cat /sys/kernel/mm/transparent_hugepage/enabled; uname -r; } > $R/machine.txt 2>&1
cat $R/machine.txt
DEADLINE=400 OUT=$R bash bench/gpu/run-all.sh kernel > $R/run-all.txt 2>&1; echo "run-all rc=$?"; grep -E "^==|rc=|BW best|GRAPH|RUNTIME|DIFF|Benchmark|ERROR SUMMARY|FAIL" $R/run-all.txt | head -70
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok)|BWS|mismatch" $R/$n.txt | head -40; }
s sharing 70 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=32768,65536,262144,1048576 -bw.align=256
THESEUS_PTX_DIR=$D/bw/nopf s sharing-nopf 70 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=32768,262144,1048576 -bw.align=256
