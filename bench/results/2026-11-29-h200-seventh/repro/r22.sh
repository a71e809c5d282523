#!/usr/bin/env bash
# Device call 22 (2026-11-29, seventh run): host time per call, distribution, new against 6dee4f8 on one machine.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r22; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor|L1d|L1i|L2|L3|MHz"; grep -E "^(steal|cpu )" /proc/stat; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | head -30; }
s jit 240 $D/cuda.test -test.run TestModuleLoad
for i in 1 2; do
  s base-$i 60 $D/cuda.test.base -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 4
  s new-$i 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 4
done
s dist 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 4
s dist-noepoch 60 env THESEUS_CONTEXT_CHECK_PERIOD=1000000000 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 3
grep -E "^(steal|cpu )" /proc/stat >> $R/machine.txt
echo "== +$(( $(date +%s) - T0 ))s done"
