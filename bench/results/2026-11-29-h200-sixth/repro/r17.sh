#!/usr/bin/env bash
# Device call 17 (2026-11-29, sixth run): after review fixes (few-thread shared work) and the one-rank grid.
set -uo pipefail
D=$PWD/.device; R=$OUT/r17; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok)|BW best|DIFF|mismatch|GRAPH|RUNTIME|ONERANK|Benchmark|ERROR SUMMARY|RACECHECK SUMMARY" $R/$n.txt | head -30; }
s fewthreads 120 $D/cuda.test -test.run 'TestSharedUnitsFewThreadsGPU' -test.v
s graph1 60 $D/cuda.test -test.run 'TestGraphReplayOneRank|TestRuntimeCollectives' -test.v
s diff-bw 120 $D/cuda.test -test.run 'TestDifferential/programs/bw' -diff.full
s bandwidth 40 $D/cuda.test -test.run 'TestBandwidth$' -bw
s callhost 40 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 5
s onerank 30 $D/cuda.test -test.run xxx -test.bench 'OneRankAllReduce' -test.benchtime 20x
s racecheck 60 compute-sanitizer --tool racecheck $D/cuda.test -test.run 'TestDifferential/programs/bw/(copy|reduce)/n1$|TestSharedUnitsFewThreadsGPU'
s memcheck 40 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestDifferential/programs/bw/(copy|reduce)/n1$|TestRuntimeCollectives/nranks=1'
