#!/usr/bin/env bash
# Device call 45 (2026-11-29, eighth run): BenchmarkCallHost with the harness's call in locals
# (H, the new benchmark code) against the old loop (O, 3902b3e), interleaved on one machine.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test
D=$PWD/.device
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=uuid --format=csv,noheader; } 2>&1
for i in 1 2 3 4 5; do
  for v in O H; do
    echo "== $v-$i"; $D/cuda$v.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 2 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns|epoch-ns\/call)[^\t]*\t//g'
  done
done
for v in O H; do echo "== $v-dist"; $D/cuda$v.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 2>&1 | grep Benchmark | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns|epoch-ns\/call)[^\t]*\t//g'; done
