#!/usr/bin/env bash
# Device call 48 (2026-11-29, ninth run): the kernel with the block's context in shared memory
# embedded (THESEUS_CTX_SHARED=1 by default): the whole GPU suite (run-all.sh), with the old
# per-thread context as a variant (.device/bw/ctxthr) in the bandwidth step, then latency of
# the old context (through THESEUS_PTX_DIR) against the new embedded one, interleaved.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r48; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
echo "== +0s suite"
DEADLINE=470 bash bench/gpu/run-all.sh 2>&1 | tail -70
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|LAT" $R/$n.txt | head -14; }
s lat-ctxthr 40 env THESEUS_PTX_DIR=$D/bw/ctxthr $D/cuda.test -test.run 'TestLatency$' -lat -test.v
s lat-ctxsh 40 $D/cuda.test -test.run 'TestLatency$' -lat -test.v
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r48.tgz r48 && rm -rf r48
