#!/usr/bin/env bash
# Device call 51 (2026-11-29, ninth run): TestLatency with theseus_exec stopped after the first op
# (THESEUS_PROBE_EXIT=6), with the op loop run twice and four times (THESEUS_PROBE_REPEAT: the
# later passes find the code and metadata the first fetched), and stopped after the context
# (p2) again, against the embedded kernel.
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test
D=$PWD/.device; R=$OUT/r51; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; echo "nsys: $(command -v nsys) ncu: $(command -v ncu)"; ls /usr/local/cuda/bin 2>&1 | paste -sd' '; } > $R/machine.txt 2>&1
cat $R/machine.txt
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|PASS)|^LAT" $R/$n.txt | head -10; }
L="$D/cuda.test -test.run TestLatency$ -lat"
s lat-embedded 60 $L
for p in p6 r2 r4 p2; do s lat-$p 60 env THESEUS_PTX_DIR=$D/bw/$p $L; done
s lat-embedded-2 60 $L
NSYS=
if [ -n "$NSYS" ]; then
  echo "== +$(( $(date +%s) - T0 ))s nsys"
  timeout 200 $NSYS profile -t cuda -o /tmp/lat --force-overwrite true $L > $R/nsys-run.txt 2>&1; echo "rc=$?"
  timeout 120 $NSYS stats -r cuda_gpu_kern_sum,cuda_api_sum -f csv -o /tmp/latstats /tmp/lat.nsys-rep > $R/nsys-stats.txt 2>&1; echo "rc=$?"
  cp /tmp/latstats* $R/ 2>/dev/null; head -20 /tmp/latstats*kern* 2>/dev/null
fi
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r51.tgz r51 && rm -rf r51
