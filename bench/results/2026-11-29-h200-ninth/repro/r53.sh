#!/usr/bin/env bash
# Device call 53 (2026-11-29, ninth run): small-launch variants. TestLatency with the embedded kernel
# and with THESEUS_STAGE_META (st), THESEUS_FAST_DONE (fd), both (stfd), and both with the probe
# timestamps (stfdpt); then the runtime tests and a differential sample on stfd.
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test; tar xzf .device/bw.tgz -C .device
D=$PWD/.device; R=$OUT/r53; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|PASS|ok)|^LAT|^PROBE|GRAPH|RUNTIME|DIFF" $R/$n.txt | head -24; }
L="$D/cuda.test -test.run TestLatency$ -lat"
s lat-embedded 60 $L
for p in st fd stfd; do s lat-$p 90 env THESEUS_PTX_DIR=$D/bw/$p $L; done
s lat-stfdpt 90 env THESEUS_PTX_DIR=$D/bw/stfdpt $L -lat.probe
s lat-embedded-2 60 $L
s runtime-stfd 200 env THESEUS_PTX_DIR=$D/bw/stfd $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives' -test.v
s diff-stfd 250 $D/cuda.test -test.run TestDifferential -diff.ptx=$D/bw/stfd -diff.sample=21 -diff.corpus=/nonexistent -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r53.tgz r53 && rm -rf r53
