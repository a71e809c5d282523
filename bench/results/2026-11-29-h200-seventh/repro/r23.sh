#!/usr/bin/env bash
# Device call 23 (2026-11-29, seventh run): where a call's host time goes: one rank or two, paced or GPU-bound; the thread's first steps after a blocked launch.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r23; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor|L1d|L1i|L2|L3|MHz"; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
s afterlaunch 120 $D/driver.test -test.run xxx -test.bench AfterLaunch -test.benchtime 20000x
s callhost 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 4
s dist-n2 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 3
s dist-n2-paced 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 3 -callhost.pace 40us
s dist-n1 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 3 -callhost.ranks 1
s dist-n1-paced 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 3 -callhost.ranks 1 -callhost.pace 40us
echo "== +$(( $(date +%s) - T0 ))s done"
