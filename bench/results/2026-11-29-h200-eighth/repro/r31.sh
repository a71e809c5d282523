#!/usr/bin/env bash
# Device call 31 (2026-11-29, eighth run): what the driver's launch work costs the host path:
# BenchmarkCallHost with and without cuLaunchKernel (-callhost.dry), interleaved; the
# distribution back to back, paced and with one rank; the CPU model on this host; the machine.
set -uo pipefail
for f in .device/*.gz; do gunzip -kf $f; done; chmod +x .device/*.test*
D=$PWD/.device; R=$OUT/r31; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E 'Model name|^CPU\(s\)|L1d|L1i|L2|L3|NUMA|Flags' | cut -c1-400;
  echo "clocksource: $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>&1)";
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled 2>&1)";
  grep -H . /sys/devices/system/cpu/vulnerabilities/* 2>&1 | sed 's|.*/||' ; cat /proc/cmdline; uname -r; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
s cpu 120 $D/theseus.test -test.run xxx -test.bench 'CallHostCPU/(default|gpubound)$' -test.benchtime 20000x -test.count 3
for i in 1 2; do
  s real-$i 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3
  s dry-$i 60 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 3 -callhost.dry
done
s dist-real 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2
s dist-dry 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 -callhost.dry
s dist-dry-n1 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 -callhost.dry -callhost.ranks 1
s dist-dry-paced 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 -callhost.dry -callhost.pace 20us
s dist-real-paced 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist$' -test.benchtime 20000x -test.count 2 -callhost.pace 40us
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r31.tgz r31 && rm -rf r31
