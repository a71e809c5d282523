#!/usr/bin/env bash
# Device call 11 (2026-11-29, sixth run): the theseus_units entry (copy bandwidth), host-time split.
set -uo pipefail
D=$PWD/.device; R=$OUT/r11; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|DIFF|BWS|BW best|mismatch|GRAPH|RUNTIME|KERNEL.*float32|Benchmark" $R/$n.txt | head -60; }
s load 150 $D/cuda.test -test.run TestKernelModules -test.v
s sharing 120 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=32768,262144,1048576 -bw.entry=units,exec -bw.align=256 -test.v
s diff-bw 150 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full
s graph1 60 $D/cuda.test -test.run 'TestGraphReplayOneRank|TestRuntimeCollectives' -test.v
s callhost-parts 60 $D/cuda.test -test.run xxx -test.bench 'CallHostParts|CallHostPaced' -test.benchtime 20000x -test.count 2 -callhost.parts
s callhost 40 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
