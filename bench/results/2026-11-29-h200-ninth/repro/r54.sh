#!/usr/bin/env bash
# Device call 54 (2026-11-29, ninth run): the whole GPU suite (run-all.sh) with the staged-metadata
# and one-store-done kernel embedded (the old kernel as the variant .device/bw/old in the bandwidth
# step); then latency of the old kernel (THESEUS_PTX_DIR) against the embedded one, with the SM
# clock sampled during the second.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r54; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
echo "== +0s suite"
DEADLINE=460 bash bench/gpu/run-all.sh 2>&1 | tail -40
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|^LAT" $R/$n.txt | head -10; }
s lat-old 40 env THESEUS_PTX_DIR=$D/bw/old $D/cuda.test -test.run 'TestLatency$' -lat
nvidia-smi --query-gpu=timestamp,pstate,clocks.sm,clocks.max.sm,clocks.mem,utilization.gpu --format=csv -lms 250 > $R/clocks.txt 2>&1 &
SMI=$!
s lat-new 40 $D/cuda.test -test.run 'TestLatency$' -lat
kill $SMI 2>/dev/null
head -3 $R/clocks.txt; sort -t, -k3 $R/clocks.txt | tail -2
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r54.tgz r54 && rm -rf r54
