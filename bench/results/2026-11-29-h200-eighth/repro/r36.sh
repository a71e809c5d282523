#!/usr/bin/env bash
# Device call 36 (2026-11-29, eighth run): four Go frames fewer (F, 6f5d13f) against B (6359241),
# and F built with -pgo from call 34's profile (FP), interleaved on one machine; F's runtime tests.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r36; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns|epoch-ns\/call)[^\t]*\t//g' | head -30; }
for i in 1 2 3 4; do
  for v in B F FP; do
    s $v-$i 60 $D/cuda$v.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 2
  done
done
for v in B F FP; do
  s $v-dist 60 $D/cuda$v.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2
done
s F-tests 200 $D/cudaF.test -test.run 'TestGraph|TestRuntimeCollectives|TestReaper|TestResident|TestCaptureLaunch' -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r36.tgz r36 && rm -rf r36
