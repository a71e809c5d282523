#!/usr/bin/env bash
# Device call B (2026-12-02, fifteenth run; carry .device/f): kernel variants at the 512-thread
# launch bound, measurement builds (cuda/kernel/build.sh bench) loaded through THESEUS_PTX_DIR:
#   old512  12728ec's source at -DMAX_THREADS=512 (the launch bound alone)
#   w1      + the whole table staged by warp 1 (b29212a's staging moved to one warp)
#   pk      12728ec + 512 + combine_packets holding each group in registers
#   w1pk    both
# 1. BenchmarkLatency interleaved twice, and the probe timestamps of old512, pk, w1pk;
# 2. ptxas -v of theseus_exec (w1pk, pk); 3. the differential sample on w1pk and on pk.
CALL=rB
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-02-h200-fifteenth/repro/common.sh
mkdir -p $W/ptxas
for v in pk w1pk; do (/usr/local/cuda/bin/ptxas -arch=sm_90 -v $D/v/$v/theseus_float32.ptx -o /dev/null > $W/ptxas/$v.txt 2>&1) & done
for k in 1 2; do
  for v in old512 w1 pk w1pk; do lat $v-$k THESEUS_PTX_DIR=$D/v/$v; done
done
for v in old512probe pkprobe w1pkprobe; do s lat-$v 40 env THESEUS_PTX_DIR=$D/v/$v $D/cuda.test -test.run xxx -test.bench 'Latency/8B/eager$' -test.benchtime 1000x -lat.probe; done
wait
for v in pk w1pk; do echo "PTXAS $v: $(grep -A3 "Compiling entry function 'theseus_exec'" $W/ptxas/$v.txt | grep -o '[0-9]* bytes stack frame.*\|Used [0-9]* registers' | tr '\n' ' ')"; done
s diff-w1pk 170 $D/cuda.test -test.run 'TestDifferential/programs/(oneshot|direct|twoshot|ring)/' -diff.sample=41 -diff.corpus=/nonexistent -diff.ptx=$D/v/w1pk -test.v
s diff-pk 170 $D/cuda.test -test.run 'TestDifferential/programs/(oneshot|direct|twoshot|ring)/' -diff.sample=41 -diff.corpus=/nonexistent -diff.ptx=$D/v/pk -test.v
summaries
for v in old512probe pkprobe w1pkprobe; do echo "PROBE $v $(grep -h "BenchmarkLatency/8B/eager" $W/lat-$v/log.txt | tr '\t' ' ' | sed 's/  */ /g')"; done
echo "== +$(( $(date +%s) - T0 ))s done"
pack
