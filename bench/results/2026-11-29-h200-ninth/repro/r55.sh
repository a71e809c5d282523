#!/usr/bin/env bash
# Device call 55 (2026-11-29, ninth run): small launches with fewer threads per block
# (THESEUS_NTHREADS) and with data_op_t inlined (THESEUS_DATA_INLINE, .device/bw/inl): TestLatency.
set -uo pipefail
gunzip -kf .device/cuda.test.gz; chmod +x .device/cuda.test
D=$PWD/.device; R=$OUT/r55; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL)|^LAT +(8|2048|32768) " $R/$n.txt | head -6; }
L="$D/cuda.test -test.run TestLatency$ -lat"
s lat-512 30 $L
for n in 256 128 64; do s lat-$n 30 env THESEUS_NTHREADS=$n $L; done
s lat-inl 40 env THESEUS_PTX_DIR=$D/bw/inl $L
s lat-inl-64 30 env THESEUS_PTX_DIR=$D/bw/inl THESEUS_NTHREADS=64 $L
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r55.tgz r55 && rm -rf r55
