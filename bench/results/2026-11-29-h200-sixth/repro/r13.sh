#!/usr/bin/env bash
# Device call 13 (2026-11-29, sixth run): shared work as runs (f615876): tile sweep, the runs against the
# interpreter, one-rank runtime/graph, host-path microbenchmarks and host time per call.
set -uo pipefail
D=$PWD/.device; R=$OUT/r13; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok)|BWS|DIFF|mismatch|GRAPH|RUNTIME|Benchmark" $R/$n.txt | head -40; }
s sharing 150 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=32768,65536,131072,262144,1048576 -bw.align=256
THESEUS_PTX_DIR=$D/bw/nopf s sharing-nopf 70 $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=32768,65536,262144 -bw.align=256
s hostpaths 30 $D/driver.test -test.run xxx -test.bench HostPaths
s callhost-parts 50 $D/cuda.test -test.run xxx -test.bench 'CallHostParts|CallHostPaced' -test.benchtime 20000x -test.count 2 -callhost.parts
s callhost 40 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
s graph1 60 $D/cuda.test -test.run 'TestGraphReplayOneRank|TestRuntimeCollectives' -test.v
s diff-bw 150 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full
