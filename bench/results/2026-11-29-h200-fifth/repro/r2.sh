#!/usr/bin/env bash
# Device call 2 of 2026-11-29 (fifth run): graph-test fix, reference copies (prepare.sh with BW_VARIANTS='refs:...' as in 1), host-time profile; theseus.test built with go test -c ./runtime/theseus
set -uo pipefail
D=$PWD/.device; R=$OUT/r2; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
s() { local n=$1 t=$2; shift 2; echo "== $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|DIFF|BW best|BW memcpy|BWS|Benchmark|ERROR SUMMARY|mismatch" $R/$n.txt | head -60; }
s graph 150 $D/cuda.test -test.run TestGraph -test.v
s runtime 90 $D/cuda.test -test.run TestRuntimeCollectives -test.v
s callhost 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3 -test.cpuprofile $R/callhost.prof
s callhostcpu 60 $D/theseus.test -test.run xxx -test.bench 'CallHostCPU/default' -test.benchtime 200000x -test.count 3
s bandwidth 200 $D/cuda.test -test.run TestBandwidth -bw -bw.variants=$D/bw/refs -test.v
s memcheck 60 compute-sanitizer --tool memcheck $D/cuda.test -test.run 'TestDifferential/programs/ring/allreduce/n2/simple$'
s diff-corpus 120 $D/cuda.test -test.run 'TestDifferential/programs/corpus' -diff.corpus=$D/corpus -test.v
