#!/usr/bin/env bash
# Device call 19 (2026-11-29, sixth run): shared work at any number of slices: the bw programs against the
# interpreter in every datatype and redop, one-rank runtime/graph, a one-rank 1 GiB allreduce, op bandwidth.
set -uo pipefail
D=$PWD/.device; R=$OUT/r19; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok)|BW best|DIFF|mismatch|GRAPH|RUNTIME|ONERANK|ERROR SUMMARY" $R/$n.txt | head -20; }
s graph1 90 $D/cuda.test -test.run 'TestGraphReplayOneRank|TestRuntimeCollectives|TestSharedUnitsFewThreadsGPU' -test.v
s onerank 30 $D/cuda.test -test.run xxx -test.bench 'OneRankAllReduce' -test.benchtime 20x
s diff-bw 130 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full
s bandwidth 40 $D/cuda.test -test.run 'TestBandwidth$' -bw
