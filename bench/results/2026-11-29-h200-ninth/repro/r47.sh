#!/usr/bin/env bash
# Device call 47 (2026-11-29, ninth run): where the launch's posted stores are paid for.
# BenchmarkCallHost with no fence after cuLaunchKernel (d0), a full fence inside the launch's
# timed interval (d1), and one after it timed on its own (d2: drain-ns/call), interleaved;
# the same fence without the launch (dry); the parts and the distribution with d0 and d1.
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test
D=$PWD/.device; R=$OUT/r47; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; cat /proc/sys/kernel/random/boot_id; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
B="$D/cuda.test -test.run xxx -test.benchtime 20000x"
for i in 1 2 3; do
  s d0-$i 60 $B -test.bench 'CallHost$' -test.count 2
  s d1-$i 60 $B -test.bench 'CallHost$' -test.count 2 -callhost.drain 1
  s d2-$i 60 $B -test.bench 'CallHost$' -test.count 2 -callhost.drain 2
done
s dry-d2 60 $B -test.bench 'CallHost$' -test.count 2 -callhost.drain 2 -callhost.dry
s parts-d0 60 $B -test.bench 'CallHostParts$' -test.count 2 -callhost.parts
s parts-d1 60 $B -test.bench 'CallHostParts$' -test.count 2 -callhost.parts -callhost.drain 1
s dist-d0 60 $B -test.bench 'CallHostDist$' -test.count 2
s dist-d1 60 $B -test.bench 'CallHostDist$' -test.count 2 -callhost.drain 1
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r47.tgz r47 && rm -rf r47
