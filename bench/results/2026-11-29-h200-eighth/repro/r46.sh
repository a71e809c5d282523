#!/usr/bin/env bash
# Device call 46 (2026-11-29, eighth run): the kernel variant with the block's context in shared
# memory (THESEUS_CTX_SHARED=1, .device/bw/ctxsh, built by prepare.sh with BW_VARIANTS) against
# the embedded kernel: latency, bandwidth, and correctness (runtime tests and a differential
# sample on the variant).
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test; tar xzf .device/ctxsh.tgz -C .device
D=$PWD/.device; V=$D/bw/ctxsh; R=$OUT/r46; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; cat $V/flags.txt; nvidia-smi --query-gpu=name,driver_version,uuid --format=csv,noheader; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|GRAPH|RUNTIME|LAT|BW best|BW memcpy|DIFF|Benchmark" $R/$n.txt | head -24; }
s lat-embedded 90 $D/cuda.test -test.run 'TestLatency$' -lat -test.v
s lat-ctxsh 90 env THESEUS_PTX_DIR=$V $D/cuda.test -test.run 'TestLatency$' -lat -test.v
s lat-embedded-2 60 $D/cuda.test -test.run 'TestLatency$' -lat -test.v
s lat-ctxsh-2 60 env THESEUS_PTX_DIR=$V $D/cuda.test -test.run 'TestLatency$' -lat -test.v
s runtime-ctxsh 120 env THESEUS_PTX_DIR=$V $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives' -test.v
s bandwidth 150 $D/cuda.test -test.run 'TestBandwidth$' -bw -bw.variants=$V -test.v
s diff-ctxsh 200 $D/cuda.test -test.run TestDifferential -diff.ptx=$V -diff.sample=21 -diff.corpus=/nonexistent -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r46.tgz r46 && rm -rf r46
