#!/usr/bin/env bash
# Device call 34 (2026-11-29, eighth run): a CPU profile of BenchmarkCallHost's timed calls (for a
# profile-guided build).
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r34; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
$D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 100000x -test.count 1 -callhost.prof $R/callhost.prof 2>&1 | grep Bench
$D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 100000x -test.count 1 -callhost.prof $R/callhost-dry.prof -callhost.dry 2>&1 | grep Bench
ls -la $R
