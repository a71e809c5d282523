#!/usr/bin/env bash
# Device calls 39-44 (2026-11-29, eighth run): host time per call at the final code (3902b3e) on
# fresh machines, one machine per call, beside the machine's CPU speed: the CPU-only model of the
# same path (BenchmarkCallHostCPU/default, no driver, no GPU) and the CPU's identity.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test
D=$PWD/.device
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; grep -m5 -E "^(model|cpu MHz|stepping|microcode|bogomips)\s*:" /proc/cpuinfo | tr '\n' ' '; echo; } 2>&1
$D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 6 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g'
$D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g'
$D/theseus.test -test.run xxx -test.bench 'CallHostCPU/default$' -test.benchtime 50000x -test.count 3 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (capture-checks|cgo-calls|driver-calls|l2-hits)\/call[^\t]*\t//g'
