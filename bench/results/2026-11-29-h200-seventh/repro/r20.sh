#!/usr/bin/env bash
# Device call 20 (2026-11-29, seventh run): the repeat fast path (3456291) against 6dee4f8, host time per call.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/cuda.test*
D=$PWD/.device; R=$OUT/r20; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor|L1d|L1i|L2|L3"; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|Benchmark" $R/$n.txt | head -30; }
s jit 240 $D/cuda.test -test.run TestModuleLoad -test.v
for i in 1 2; do
  s callhost-base-$i 60 $D/cuda.test.base -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 5
  s callhost-new-$i 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 5
done
s parts-new 90 $D/cuda.test -test.run xxx -test.bench 'CallHostParts|CallHostPaced' -test.benchtime 20000x -test.count 3 -callhost.parts
s noepoch-new 40 env THESEUS_CONTEXT_CHECK_PERIOD=1000000000 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
s tests-new 240 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives|TestReaper|TestResident|TestLatency' -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
