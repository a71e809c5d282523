#!/usr/bin/env bash
# Device call 32 (2026-11-29, eighth run): the hot-path layout (B, 6359241) against its parent
# (A, 6eb2666) on one machine: BenchmarkCallHost x 8 each and BenchmarkCallHostDist x 2 each,
# interleaved; then B's runtime tests on the GPU.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r32; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|Thread|Core|Socket'; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
for i in 1 2 3 4; do
  s A-$i 60 $D/cudaA.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 2
  s B-$i 60 $D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 2
done
s A-dist 60 $D/cudaA.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2
s B-dist 60 $D/cudaB.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2
s B-tests 200 $D/cudaB.test -test.run 'TestGraph|TestRuntimeCollectives|TestReaper|TestResident|TestCaptureLaunch' -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r32.tgz r32 && rm -rf r32
