#!/usr/bin/env bash
set -u
O=$OUT; R=/tmp/r; mkdir -p $R
T0=$(date +%s)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 GODEBUG=asyncpreemptoff=1
export CUDA_CACHE_MAXSIZE=4294967296
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log; mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
nvidia-cuda-mps-control -d && echo MPS started
el() { echo "+$(( $(date +%s) - T0 ))s"; }
s() { n=$1; t=$2; shift 2; echo "== $(el) $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "$n rc=$? $(el)"; grep -E "^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|LAT|BW|DIFF|RUNTIME|Benchmark)|Wrong|#wrong = " $R/$n.txt | head -${HEADN:-12}; }
s graph 130 .device/cuda.test -test.run TestGraphReplay -test.v
s runtime 90 .device/cuda.test -test.run TestRuntimeCollectives -test.v
HEADN=20 s bw 60 .device/cuda.test -test.run TestBandwidth -bw -test.v
s callhost 40 .device/cuda.test -test.run xxx -test.bench CallHost -test.benchtime 20000x -test.count 3
s lat 40 .device/cuda.test -test.run TestLatency -lat -test.v
( cp .device/build_nccl_tests.sh ncclabi/gpu/build_nccl_tests.sh; THESEUS_PREFIX=$PWD/.device/prefix bash ncclabi/gpu/build_nccl_tests.sh > $R/ncclbuild.txt 2>&1; echo "build rc=$?" >> $R/ncclbuild.txt ) &
B=$!
s bench 150 .device/theseus-bench --backend cuda -e 256M &
s diff 150 .device/cuda.test -test.run TestDifferential -test.v -diff.corpus=.device/corpus -diff.out=$R/diffcases.txt -test.parallel 8 &
rm -f /tmp/tb.id
(export THESEUS_ALLOW_SHARED_DEVICE=1; for r in 0 1; do RANK=$r WORLD_SIZE=2 timeout 120 .device/theseus-bench --backend cuda --id-file /tmp/tb.id -e 16M >$R/benchmp.$r.txt 2>&1 & done; wait; echo "bench-mp done $(el)"; tail -3 $R/benchmp.0.txt)
wait
tail -3 $R/bench.txt; grep -v " ok$" $R/diffcases.txt | head -3; tail -2 $R/ncclbuild.txt
export THESEUS_PREFIX=$PWD/.device/prefix RESULTS=$R
(SIZES="-b 8 -e 16M -f 8" ITERS="-n 5 -w 2" NRANKS=2 MODES="ldpath audit" TESTS="all_reduce all_gather reduce_scatter broadcast reduce alltoall" timeout 130 bash ncclabi/gpu/run_nccl_tests.sh > $R/nccltests.txt 2>&1; echo "nccl rc=$? $(el)"; grep "^|" $R/nccl-tests/summary.md | tail -13) &
(NRANKS=2 timeout 130 bash ncclabi/gpu/run_torch_check.sh > $R/torch.txt 2>&1; echo "torch rc=$? $(el)"; tail -4 $R/torch.txt) &
s memcheck 110 compute-sanitizer --tool memcheck .device/cuda.test -test.run 'TestDifferential/programs/ring/allreduce/n2/simple$' &
wait
tail -3 $R/memcheck.txt
echo "== $(el) end"
tar czf $O/r.tgz -C /tmp r
