#!/usr/bin/env bash
# Device call 52 (2026-11-29, ninth run): inside a small launch. TestLatency -lat.probe with the
# THESEUS_PROBE_TIMES kernel (thread 0 of block 0 records %globaltimer at fixed points: 1 after
# the launch state, 2 after the context, 3 after the launch fence, 4/5/6 first op start / after
# its dependency check / end, 7/8/9 the same for the second op, 12/13/14 inside the last data op:
# after its first barrier / after placing its refs / after combining, 10/11 before and after
# publishing the done word); also stopped after the first op (pt6) and with the op loop twice (pt2).
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test
D=$PWD/.device; R=$OUT/r52; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|PASS)|^LAT|^PROBE" $R/$n.txt | head -24; }
L="$D/cuda.test -test.run TestLatency$ -lat -lat.probe"
for p in pt pt6 pt2; do s lat-$p 60 env THESEUS_PTX_DIR=$D/bw/$p $L; done
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r52.tgz r52 && rm -rf r52
