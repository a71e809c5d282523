#!/usr/bin/env bash
# Device call C (2026-12-02, fourteenth run; carry .device/f, .device/ctx, third_party): the LL
# threads rule (one thread per 8-byte payload of a threadblock's chunk, 64..512: cuda
# tableThreads) and ll_max_bytes 131072, against call B's build (.device/b/cuda.test: 256
# threads up to 2 KiB a threadblock, 512 above) and the context before this run (ctx/old):
#   1. BenchmarkLatency, this build and call B's interleaved twice, and this build on ctx/old;
#   2. GPU tests: TestGraph, TestRuntimeCollectives; nccl-tests all_reduce, all_gather,
#      reduce_scatter, alltoall at 2 and 4 ranks (8 B - 1 MiB, #wrong), all_reduce eager and
#      -G 1 at 2 ranks (8 B - 64 KiB); the allreduce sweep (2 processes); a differential sample
#      of the all-pairs programs (the wide ones included); PyTorch's checks at 2 ranks; the
#      allreduce sweep at 4 ranks in one process.
CALL=rC
DEADLINE=${DEADLINE:-575}
source bench/results/2026-12-02-h200-fourteenth/repro/common.sh
build_nccl_tests
LB='Latency/[0-9]+B/(eager|graph)$'
for k in 1 2; do
  s lat-new-$k 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
  s lat-b-$k 30 $D/b/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
done
s lat-oldctx 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/ctx/old
s gputests 100 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives' -test.v
wait_nccl_tests
s nccl-wrong 80 env SIZES="-b 8 -e 1M -f 4" ITERS="-n 5 -w 2" NRANKS="2 4" MODES=ldpath TESTS="all_reduce all_gather reduce_scatter alltoall" THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
nccl_g01 40
s sweep-allreduce 100 bash $W/sweep2.sh -b 8 -e 1M -f 2 --coll allreduce --save $W/sweep-allreduce/sweep.json
s diff 120 $D/cuda.test -test.run 'TestDifferential/programs/(oneshot|direct|twoshot)/' -diff.sample=41 -diff.corpus=/nonexistent -test.v
s torch 80 env NRANKS=2 bash ncclabi/gpu/run_torch_check.sh
s sweep4 60 $D/theseus-bench sweep --backend cuda --nranks 4 -b 8 -e 1M -f 4 --coll allreduce --save $W/sweep4/sweep.json
summaries
echo "== +$(( $(date +%s) - T0 ))s done"
pack
