#!/usr/bin/env bash
# Device call 37 (2026-11-29, eighth run): the session's final code (3902b3e): host time per call,
# then the whole GPU suite (run-all.sh: kernel steps and clients) in one call.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r37; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
$D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 4 > $R/callhost.txt 2>&1
grep Benchmark $R/callhost.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g'
echo "== +$(( $(date +%s) - T0 ))s suite"
DEADLINE=540 bash bench/gpu/run-all.sh 2>&1 | tail -60
echo "== +$(( $(date +%s) - T0 ))s done"
