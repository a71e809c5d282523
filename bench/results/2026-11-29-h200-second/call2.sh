#!/usr/bin/env bash
set -u
O=$OUT; R=/tmp/r; mkdir -p $R
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 GODEBUG=asyncpreemptoff=1
( cp .device/build_nccl_tests.sh ncclabi/gpu/build_nccl_tests.sh; THESEUS_PREFIX=$PWD/.device/prefix bash ncclabi/gpu/build_nccl_tests.sh > $R/ncclbuild.txt 2>&1; echo "build rc=$?" >> $R/ncclbuild.txt ) &
s() { n=$1; t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|LAT|BW|DIFF|RUNTIME|Benchmark)|Wrong|#wrong = " $R/$n.txt | head -${HEADN:-12}; }
ptxas -arch=sm_90 -v cuda/kernel/theseus.ptx -o /tmp/k.cubin > $R/ptxas.txt 2>&1; grep -E "registers|spill" $R/ptxas.txt | head -3
s runtime 100 .device/cuda.test -test.run TestRuntimeCollectives -test.v
s graph 60 .device/cuda.test -test.run TestGraphReplay -test.v
HEADN=40 s bw 90 .device/cuda.test -test.run TestBandwidth -bw -test.v
s callhost 60 .device/cuda.test -test.run xxx -test.bench CallHost -test.benchtime 20000x -test.count 3
s lat 60 .device/cuda.test -test.run TestLatency -lat -test.v
s bench 150 .device/theseus-bench --backend cuda -e 256M
tail -4 $R/bench.txt
s diff 150 .device/cuda.test -test.run TestDifferential -test.v -diff.corpus=.device/corpus -diff.out=$R/diffcases.txt -test.parallel 16
grep -v " ok$" $R/diffcases.txt | head -5
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && echo MPS started
rm -f /tmp/tb.id
(export THESEUS_ALLOW_SHARED_DEVICE=1; for r in 0 1; do RANK=$r WORLD_SIZE=2 timeout 120 .device/theseus-bench --backend cuda --id-file /tmp/tb.id -e 64M >$R/benchmp.$r.txt 2>&1 & done; wait)
echo "== +$(( $(date +%s) - T0 ))s bench-mp"; tail -3 $R/benchmp.0.txt
wait; tail -2 $R/ncclbuild.txt
export THESEUS_PREFIX=$PWD/.device/prefix RESULTS=$R
SIZES="-b 8 -e 16M -f 8" ITERS="-n 5 -w 2" NRANKS=2 MODES="ldpath" TESTS="all_reduce alltoall" timeout 120 bash ncclabi/gpu/run_nccl_tests.sh > $R/nccltests.txt 2>&1; echo "nccl rc=$?"; grep "^|" $R/nccl-tests/summary.md | tail -3
echo quit | nvidia-cuda-mps-control
NRANKS=2 timeout 150 bash ncclabi/gpu/run_torch_check.sh > $R/torch.txt 2>&1; echo "torch rc=$?"; tail -5 $R/torch.txt
echo "== +$(( $(date +%s) - T0 ))s end"
tar czf $O/r.tgz -C /tmp r
