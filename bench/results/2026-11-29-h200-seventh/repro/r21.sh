#!/usr/bin/env bash
# Device call 21 (2026-11-29, seventh run): what the host code pays right after cuLaunchKernel (BenchmarkAfterLaunch), and CallHost pinned to 4 cores.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test
D=$PWD/.device; R=$OUT/r21; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor|L1d|L1i|L2|L3|MHz"; cat /proc/cmdline; cat /sys/devices/system/cpu/cpuidle/current_driver 2>&1; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | head -30; }
s afterlaunch 120 $D/driver.test -test.run xxx -test.bench AfterLaunch -test.benchtime 20000x -test.count 2
s hostpaths 30 $D/driver.test -test.run xxx -test.bench 'HostPaths|HostCalls'
s callhost-pin4 60 taskset -c 4-7 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 5
s callhost 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 5
echo "== +$(( $(date +%s) - T0 ))s done"
