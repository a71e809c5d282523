#!/usr/bin/env bash
# Device call 49 (2026-11-29, ninth run): is the host time after the launch address-translation
# misses? BenchmarkCallHost with transparent huge pages as the machine has them (madvise) and
# with THP "always" (the Go heap and stacks on 2 MiB pages), interleaved; the machine's PMU.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D cuda.test
R=$OUT/r49; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader;
  echo "pmu: $(ls /sys/bus/event_source/devices/ 2>&1 | paste -sd' ')"; echo "arch_perfmon: $(grep -c arch_perfmon /proc/cpuinfo)";
  echo "perf: $(command -v perf)"; echo "paranoid: $(cat /proc/sys/kernel/perf_event_paranoid 2>&1)";
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; } > $R/machine.txt 2>&1
cat $R/machine.txt
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
B="$D/cuda.test -test.run xxx -test.benchtime 20000x"
thp() { echo $1 > /sys/kernel/mm/transparent_hugepage/enabled; echo "thp now: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; }
for i in 1 2 3; do
  thp madvise; s madvise-$i 60 $B -test.bench 'CallHost$' -test.count 3
  thp always; s always-$i 60 $B -test.bench 'CallHost$' -test.count 3
  grep -E "AnonHugePages" /proc/meminfo
done
thp always; s always-parts 60 $B -test.bench 'CallHostParts$' -test.count 2 -callhost.parts
thp always; s always-dry 60 $B -test.bench 'CallHost$' -test.count 2 -callhost.dry
thp madvise
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r49.tgz r49 && rm -rf r49
