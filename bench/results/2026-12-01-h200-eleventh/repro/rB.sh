#!/usr/bin/env bash
# Device call B (2026-12-01, eleventh run): call A's steps that its script bugs lost (the A/B tarball in the wrong place; set -e in the lost-peer scripts), the C launcher (replay_check), latency new vs old again after the graph-destroy fix
#
# Carry .device/ab (ab.tgz: before/after cuda.test + NCCL prefix) and .device/a (ptx.tgz: old PTX).
set -uo pipefail
ROOT=$PWD; A=$ROOT/.device/a; D=$ROOT/.device
X=/tmp/ab; mkdir -p $X; tar xzf $D/ab/ab.tgz -C $X; tar xzf $A/ptx.tgz -C $D
ln -sf $X/after/cuda.test $D/cuda.test; ln -sfn $X/after/prefix $D/prefix; cp $A/COMMIT $D/COMMIT
R=$OUT/rB; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
DEADLINE=${DEADLINE:-555}
pack() { (cd $OUT && tar czf rB.tgz.tmp rB && mv rB.tgz.tmp rB.tgz); }
s() { local n=$1 t=$2; shift 2; local left=$(( DEADLINE - ($(date +%s) - T0) )); [ $left -lt 10 ] && { echo "== $n skipped"; return; }; [ $t -gt $left ] && t=$left; echo "== +$(( $(date +%s) - T0 ))s $n (bound ${t}s)"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; pack; grep -E "^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|KERNEL|DIFF|LOSTPEER|SIGSTACK|TORCHCHECK)|^Benchmark(Latency|CallHost)|HOST replay|selection context|rc=|Wrong" $R/$n.txt | sort | uniq -c | sort -rn | head -24; }
C=$D/cuda.test; OLD=$D/old-ptx
s callbench-ab 260 env OUT=$R ROUNDS=2 bash bench/gpu/run-callbench-ab.sh
export THESEUS_PREFIX=$D/prefix RESULTS=$R
s replay-check 100 bash ncclabi/gpu/run_replay_check.sh
s lostpeer 70 env ROUNDS=2 THESEUS_TIMEOUT=5000 bash ncclabi/gpu/run_lostpeer.sh
s torch-lostpeer 70 env ROUNDS=1 HANDLING="unset 1 2" THESEUS_TIMEOUT=5000 bash ncclabi/gpu/run_torch_lostpeer.sh
s lat-new 30 $C -test.run xxx -test.bench Latency -test.benchtime 1000x
s lat-old 30 env THESEUS_PTX_DIR=$OLD $C -test.run xxx -test.bench Latency -test.benchtime 1000x
echo "== +$(( $(date +%s) - T0 ))s done"
pack; rm -rf $OUT/rB
