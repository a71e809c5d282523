#!/usr/bin/env bash
# Device call G7 (2026-12-01, twelfth run), at a2562e6's kernel: does the executor's 64-register
# bound cost small calls? ptxas's registers and spills of theseus_exec in the float32 module
# built with MAX_THREADS=512 (up to 128 registers) and with the default 1024, and
# BenchmarkLatency (8 B, 2 KiB, 32 KiB, eager and graph) of the embedded kernel, the same build
# (t1024) and the 512 one (t512), interleaved, through THESEUS_PTX_DIR. Measurement only: a
# 512-thread bound would refuse 1024-thread launches. Carry .device/f.
CALL=rG7
DEADLINE=${DEADLINE:-300}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
s ptxas 60 bash -c "for v in t1024 t512; do echo \"== \$v\"; ptxas -arch=sm_90 -v -o /dev/null $D/bw/\$v/theseus_float32.ptx 2>&1 | grep -A2 \"entry function 'theseus_exec'\"; done"
B='Latency/(8B|2048B|32768B)/(eager|graph)$'
for k in 1 2; do
  s lat-embedded-$k 40 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x
  s lat-t1024-$k 60 env THESEUS_PTX_DIR=$D/bw/t1024 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x
  s lat-t512-$k 60 env THESEUS_PTX_DIR=$D/bw/t512 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x
done
echo "== +$(( $(date +%s) - T0 ))s done"
pack
