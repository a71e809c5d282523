#!/usr/bin/env bash
# Device call 35 (2026-11-29, eighth run): B (6359241) against P (the same source built with
# -pgo from call 34's profile: two fewer Go frames on the hot path), interleaved, one machine.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r35; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns|epoch-ns\/call)[^\t]*\t//g' | head -30; }
for i in 1 2 3 4; do
  s B-$i 60 $D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 2
  s P-$i 60 $D/cudaP.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 2
done
s B-parts 60 $D/cudaB.test -test.run xxx -test.bench 'CallHostParts$' -test.benchtime 20000x -test.count 2 -callhost.parts
s P-parts 60 $D/cudaP.test -test.run xxx -test.bench 'CallHostParts$' -test.benchtime 20000x -test.count 2 -callhost.parts
echo "== +$(( $(date +%s) - T0 ))s done"
