#!/usr/bin/env bash
# Device call 33 (2026-11-29, eighth run): where a pause lands: the parts of a call (driver
# queries, crossing, Go) back to back and paced, with and without cuLaunchKernel (-callhost.dry);
# BenchmarkCallHost confined to 4 CPUs.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r33; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|Thread|Core|Socket'; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
for i in 1 2; do
  s parts-real-$i 90 $D/cudaB.test -test.run xxx -test.bench 'CallHost(Parts|Paced)$' -test.benchtime 20000x -test.count 2 -callhost.parts
  s parts-dry-$i 90 $D/cudaB.test -test.run xxx -test.bench 'CallHost(Parts|Paced)$' -test.benchtime 20000x -test.count 2 -callhost.parts -callhost.dry
done
s callhost 60 $D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
s callhost-cpu4 60 env GOMAXPROCS=4 taskset -c 4-7 $D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
s callhost-cpu2 60 env GOMAXPROCS=2 taskset -c 4,6 $D/cudaB.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r33.tgz r33 && rm -rf r33
