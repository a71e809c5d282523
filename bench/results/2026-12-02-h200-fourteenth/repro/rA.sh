#!/usr/bin/env bash
# Device call A (2026-12-02, fourteenth run; carry .device): on one H200, 2 ranks as goroutines
# of one process (cuda.test's localComms):
#   1. BenchmarkLatency (LL one-shot allreduce) with 1, 2, 4, 8, 16 channels (contexts from
#      make-contexts.sh), and threads 256/512/1024 at some of them (THESEUS_NTHREADS);
#   2. the LL launch fence: BenchmarkLatency with self-fenced LL schedules unfenced (default)
#      and THESEUS_LL_FENCE=1, interleaved twice;
#   3. cuda.test's runtime, graph and differential tests with the fence off and on.
CALL=rA
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
B='Latency/(8B|2048B|8192B|32768B)/(eager|graph)$'
for k in 1 2 4 8 16; do
  s ch$k 30 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x -comms.context=$D/ctx/ch$k
done
s ch1-t1024 30 env THESEUS_NTHREADS=1024 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x -comms.context=$D/ctx/ch1
s ch4-t1024 30 env THESEUS_NTHREADS=1024 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x -comms.context=$D/ctx/ch4
s ch8-t256 30 env THESEUS_NTHREADS=256 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x -comms.context=$D/ctx/ch8
s ch16-t256 30 env THESEUS_NTHREADS=256 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x -comms.context=$D/ctx/ch16
L='Latency/(8B|2048B|32768B)/(eager|graph)$'
for k in 1 2; do
  s lat-off-$k 30 $D/cuda.test -test.run xxx -test.bench "$L" -test.benchtime 1000x
  s lat-on-$k 30 env THESEUS_LL_FENCE=1 $D/cuda.test -test.run xxx -test.bench "$L" -test.benchtime 1000x
done
s gputests-off 110 $D/cuda.test -test.run 'TestRuntimeCollectives|TestGraph|TestDifferential$' -test.count 1
s gputests-on 110 env THESEUS_LL_FENCE=1 $D/cuda.test -test.run 'TestRuntimeCollectives|TestGraph|TestDifferential$' -test.count 1
grep -h "^BenchmarkLatency" $W/*/log.txt | head -0
for f in $W/*/log.txt; do n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done | tee $W/lat-summary.txt
echo "== +$(( $(date +%s) - T0 ))s done"
pack
