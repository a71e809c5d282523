#!/usr/bin/env bash
# Device call 4 of 2026-11-29 (fifth run): unit tiles x carveouts, call host-time parts, Nsight Compute of the executor copy vs the block copy
set -uo pipefail
D=$PWD/.device; R=$OUT/r4; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|DIFF|BW best|BW memcpy|BWS|Benchmark|ERROR SUMMARY|mismatch" $R/$n.txt | head -60; }
s sharing 180 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=65536,262144,1048576 -bw.carveout=-1,0 -test.v
s callhost-parts 90 $D/cuda.test -test.run xxx -test.bench 'CallHostParts|CallHostPaced' -test.benchtime 20000x -test.count 3 -callhost.parts
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats"
s ncu-exec 150 ncu --kernel-name theseus_exec --launch-skip 3 --launch-count 1 $SEC $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile= -bw.carveout=-1
s ncu-block 150 ncu --kernel-name theseus_block_copy --launch-skip 3 --launch-count 1 $SEC $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile= -bw.carveout=-1
