#!/usr/bin/env bash
# Device call F (2026-12-02, fifteenth run; carry .device/f): the specialised kernels after the
# fix of their load order (every rank's module loaded before any rank launches; known issue 27):
# TestDifferentialSpecialized on this build's bundles, and BenchmarkLatency on the specialised
# context with the kernels on and off (THESEUS_SPECIALIZED=0).
CALL=rF
DEADLINE=${DEADLINE:-120}
source bench/results/2026-12-02-h200-fifteenth/repro/common.sh
tar xJf .device/f/spec.txz -C .device
s diff-spec 50 $D/cuda.test -test.run TestDifferentialSpecialized -diff.spec=$D/spec-context/schedules -test.v
s lat-spec 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/spec-context
s lat-spec-off 30 env THESEUS_SPECIALIZED=0 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/spec-context
summaries
echo "== +$(( $(date +%s) - T0 ))s done"
pack
