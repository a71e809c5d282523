#!/usr/bin/env bash
# Device call 50 (2026-11-29, ninth run): where a small launch's GPU time goes. TestLatency (2-rank
# LL all-pairs allreduce, one GPU) with the embedded kernel and with theseus_exec stopped after
# each phase (THESEUS_PROBE_EXIT 1-5, through THESEUS_PTX_DIR; their results are wrong by
# design); then the kernels' own durations under Nsight Systems, if the machine has it.
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test
D=$PWD/.device; R=$OUT/r50; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "nsys: $(command -v nsys) ncu: $(command -v ncu)"; ls /usr/local/cuda/bin 2>&1 | paste -sd' '; } > $R/machine.txt 2>&1
cat $R/machine.txt
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|PASS)|^LAT" $R/$n.txt | head -10; }
L="$D/cuda.test -test.run TestLatency$ -lat"
s lat-embedded 60 $L
for p in p1 p2 p3 p5 p4; do s lat-$p 60 env THESEUS_PTX_DIR=$D/bw/$p $L; done
s lat-embedded-2 60 $L
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -n "$NSYS" ]; then
  echo "== +$(( $(date +%s) - T0 ))s nsys"
  timeout 200 $NSYS profile -t cuda -o /tmp/lat --force-overwrite true $L > $R/nsys-run.txt 2>&1; echo "rc=$?"
  timeout 120 $NSYS stats -r cuda_gpu_kern_sum,cuda_api_sum -f csv -o /tmp/latstats /tmp/lat.nsys-rep > $R/nsys-stats.txt 2>&1; echo "rc=$?"
  cp /tmp/latstats* $R/ 2>/dev/null; head -20 /tmp/latstats*kern* 2>/dev/null
fi
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r50.tgz r50 && rm -rf r50
