#!/usr/bin/env bash
# Device call A (2026-12-01, eleventh run), at the merge of issues 20, 21, 23 and 24's
# foundation: the kernel cleanup (new vs old PTX), the launch plan's host time before/after
# (34d87e3 vs now), the lost-peer crash, PyTorch with no context variable.
# Carry .device/a (ab.tgz: before/after cuda.test + NCCL prefix; ptx.tgz: old PTX, bench refs).
set -uo pipefail
ROOT=$PWD; A=$ROOT/.device/a; D=$ROOT/.device
X=/tmp/ab; mkdir -p $X; tar xzf $A/ab.tgz -C $X; tar xzf $A/ptx.tgz -C $D
ln -sf $X/after/cuda.test $D/cuda.test; ln -sfn $X/after/prefix $D/prefix; cp $A/COMMIT $D/COMMIT
R=$OUT/rA; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
T0=$(date +%s)
DEADLINE=${DEADLINE:-555}
pack() { (cd $OUT && tar czf rA.tgz.tmp rA && mv rA.tgz.tmp rA.tgz); }
s() { local n=$1 t=$2; shift 2; local left=$(( DEADLINE - ($(date +%s) - T0) )); [ $left -lt 10 ] && { echo "== $n skipped"; return; }; [ $t -gt $left ] && t=$left; echo "== +$(( $(date +%s) - T0 ))s $n (bound ${t}s)"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; pack; grep -E "^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|KERNEL|DIFF|LOSTPEER|SIGSTACK|TORCHCHECK)|^Benchmark(Latency|CallHost)|HOST replay|selection context|rc=|Wrong" $R/$n.txt | sort | uniq -c | sort -rn | head -24; }
C=$D/cuda.test; OLD=$D/old-ptx
s modules 150 $C -test.run 'TestKernelModules|TestModuleLoad' -test.v
s graph 60 $C -test.run TestGraph -test.v
s runtime 60 $C -test.run TestRuntimeCollectives -test.v
s diff 90 $C -test.run 'TestDifferential/programs/(ring|direct|oneshot|twoshot|bw)/.*/n[12]$' -diff.sample=21 -diff.corpus=/nonexistent -test.v
s lat-new 25 $C -test.run xxx -test.bench Latency -test.benchtime 1000x
s lat-old 25 env THESEUS_PTX_DIR=$OLD $C -test.run xxx -test.bench Latency -test.benchtime 1000x
s callbench-ab 200 env OUT=$R ROUNDS=1 bash bench/gpu/run-callbench-ab.sh
export THESEUS_PREFIX=$D/prefix RESULTS=$R
s lostpeer 60 env ROUNDS=1 THESEUS_TIMEOUT=5000 bash ncclabi/gpu/run_lostpeer.sh
s torch-lostpeer 80 env ROUNDS=1 HANDLING="unset 1" THESEUS_TIMEOUT=5000 bash ncclabi/gpu/run_torch_lostpeer.sh
s torch-nocontext 110 env NO_CONTEXT=1 NRANKS="2 3" bash ncclabi/gpu/run_torch_check.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack; rm -rf $OUT/rA
