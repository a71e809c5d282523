#!/usr/bin/env bash
set -u
O=$OUT; R=/tmp/r; mkdir -p $R; T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 GODEBUG=asyncpreemptoff=1
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d
el() { echo "+$(( $(date +%s) - T0 ))s"; }
(export THESEUS_PREFIX=$PWD/.device/prefix RESULTS=$R; NRANKS=4 timeout 100 bash ncclabi/gpu/run_torch_check.sh > $R/torch4.txt 2>&1; echo "torch4 rc=$? $(el)"; grep "^| 4" $R/torch/summary.md) &
timeout 60 .device/cuda.test -test.run TestRuntimeCollectives -test.v > $R/runtime.txt 2>&1; echo "runtime rc=$? $(el)"; grep -E "RUNTIME|FAIL|#wrong|failed" $R/runtime.txt | head -5
timeout 35 .device/cuda.test -test.run xxx -test.bench CallHost -test.benchtime 20000x -test.count 3 > $R/callhost.txt 2>&1; echo "callhost rc=$? $(el)"; grep -E "Benchmark|FAIL|panic" $R/callhost.txt | head -5
wait
tar czf $O/r.tgz -C /tmp r
