#!/usr/bin/env bash
# Device call C (2026-12-01, eleventh run): the launch plan's host time before/after again (in call B the
# before build ran on the after tree's default context, which it cannot read: each build now brings its
# own scripts, C programs and default context), and the lost-peer check with lostpeer.c accepting a loss
# seen only as the asynchronous error.
#
# Carry .device/ab (ab.tgz: before/after cuda.test + NCCL prefix) and .device/a (ptx.tgz: old PTX).
set -uo pipefail
ROOT=$PWD; A=$ROOT/.device/a; D=$ROOT/.device
X=/tmp/ab; mkdir -p $X; tar xzf $D/ab/ab.tgz -C $X; tar xzf $A/ptx.tgz -C $D
ln -sf $X/after/cuda.test $D/cuda.test; ln -sfn $X/after/prefix $D/prefix; cp $A/COMMIT $D/COMMIT
R=$OUT/rC; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
DEADLINE=${DEADLINE:-555}
pack() { (cd $OUT && tar czf rC.tgz.tmp rC && mv rC.tgz.tmp rC.tgz); }
s() { local n=$1 t=$2; shift 2; local left=$(( DEADLINE - ($(date +%s) - T0) )); [ $left -lt 10 ] && { echo "== $n skipped"; return; }; [ $t -gt $left ] && t=$left; echo "== +$(( $(date +%s) - T0 ))s $n (bound ${t}s)"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; pack; grep -E "^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|KERNEL|DIFF|LOSTPEER|SIGSTACK|TORCHCHECK)|^Benchmark(Latency|CallHost)|HOST replay|selection context|rc=|Wrong" $R/$n.txt | sort | uniq -c | sort -rn | head -24; }
C=$D/cuda.test; OLD=$D/old-ptx
s callbench-ab 300 env OUT=$R ROUNDS=2 bash bench/gpu/run-callbench-ab.sh
export THESEUS_PREFIX=$D/prefix RESULTS=$R
s lostpeer 70 env ROUNDS=2 THESEUS_TIMEOUT=5000 bash ncclabi/gpu/run_lostpeer.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack; rm -rf $OUT/rC
