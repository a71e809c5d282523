#!/usr/bin/env bash
# Device calls 38-45 (2026-11-29, eighth run): host time per call at the final code (3902b3e) on
# fresh machines, one machine per call: BenchmarkCallHost x 6, BenchmarkCallHostDist x 2.
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test
D=$PWD/.device
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; cat /proc/sys/kernel/random/boot_id; } 2>&1
$D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 6 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g'
$D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g'
