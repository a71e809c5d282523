#!/usr/bin/env bash
# Device call 63 (2026-11-30, tenth run): the whole GPU suite with data_op_t inlined and 256
# threads for blocks of at most 2 KiB embedded (3449e57); the previous kernel as the variant
# "old" in the bandwidth step. Then latency: old kernel at 512 threads (the ninth run's
# behaviour), new kernel at 512 threads (inlining alone), new kernel by default (both); and the
# corpus differential with 256 threads forced at every size.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r63; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
echo "== +0s suite"
DEADLINE=440 bash bench/gpu/run-all.sh 2>&1 | tail -60
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|^LAT|DIFF" $R/$n.txt | head -12; }
s lat-old-512 40 env THESEUS_PTX_DIR=$D/bw/old THESEUS_NTHREADS=512 $D/cuda.test -test.run 'TestLatency$' -lat
s lat-new-512 40 env THESEUS_NTHREADS=512 $D/cuda.test -test.run 'TestLatency$' -lat
s lat-new 40 $D/cuda.test -test.run 'TestLatency$' -lat
s diff-corpus-256 70 env THESEUS_NTHREADS=256 $D/cuda.test -test.run 'TestDifferential/programs/corpus' -diff.corpus=$D/corpus
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r63.tgz r63 && rm -rf r63
