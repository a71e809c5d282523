#!/usr/bin/env bash
# Device call D (2026-12-02, fourteenth run; carry .device/f, .device/ctx, third_party): the
# final default context (one-channel LL up to 2 KiB, the wide LL above on one node, ll_max_bytes
# 262144) and the LL threads rule, against the context before this run (ctx/old):
#   1. BenchmarkLatency, new and old context;
#   2. nccl-tests all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce at 2 and 4
#      ranks (8 B - 1 MiB, #wrong); all_reduce eager and -G 1 at 2 ranks (8 B - 64 KiB);
#      all_reduce at 128 MiB (busbw, no regression above 1 MiB);
#   3. the sweeps: allreduce 2 processes and 4 ranks in one process, the other collectives at 2;
#   4. TestGraph, PyTorch's checks at 2 ranks.
CALL=rD
DEADLINE=${DEADLINE:-400}
source bench/results/2026-12-02-h200-fourteenth/repro/common.sh
build_nccl_tests
LB='Latency/[0-9]+B/(eager|graph)$'
s lat-new 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
s lat-oldctx 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/ctx/old
s gputests 60 $D/cuda.test -test.run 'TestGraph' -test.v
wait_nccl_tests
s nccl-wrong 80 env SIZES="-b 8 -e 1M -f 4" ITERS="-n 5 -w 2" NRANKS="2 4" MODES=ldpath TESTS="all_reduce all_gather reduce_scatter alltoall broadcast reduce" THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
nccl_g01 40
s nccl-128m 40 env SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
s sweep-allreduce 100 bash $W/sweep2.sh -b 8 -e 1M -f 2 --coll allreduce --save $W/sweep-allreduce/sweep.json
s sweep-others 60 $D/theseus-bench sweep --backend cuda --nranks 2 -b 8 -e 1M -f 4 --coll allgather,reducescatter,alltoall --save $W/sweep-others/sweep.json
s sweep4 60 $D/theseus-bench sweep --backend cuda --nranks 4 -b 8 -e 1M -f 4 --coll allreduce --save $W/sweep4/sweep.json
s torch 80 env NRANKS=2 bash ncclabi/gpu/run_torch_check.sh
summaries
grep -h -E "^ +[0-9]+ +[0-9]+ +float" $W/nccl-128m/nccl-tests/*.txt
echo "== +$(( $(date +%s) - T0 ))s done"
pack
