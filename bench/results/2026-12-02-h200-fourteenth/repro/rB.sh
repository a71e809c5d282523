#!/usr/bin/env bash
# Device call B (2026-12-02, fourteenth run; carry .device/f, .device/ctx, third_party): the
# default context with the wide LL entries (a channel per chunk above 4 KiB) and the LL threads
# rule per threadblock (cuda threadBytes), against the context before (.device/ctx/old):
#   1. BenchmarkLatency (2 ranks as goroutines), new and old context interleaved twice, and
#      THESEUS_NTHREADS=128 / 64 on the new one;
#   2. GPU tests: TestGraph, TestRuntimeCollectives, a differential sample of the all-pairs
#      programs (the k16/k8 wide LL ones included);
#   3. theseus-bench sweep: allreduce, 2 processes under MPS, 8 B - 1 MiB; the other
#      collectives in one process;
#   4. nccl-tests all_reduce_perf, 2 ranks under MPS, eager (-G 0) and graph (-G 1), 8 B - 64 KiB.
CALL=rB
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-02-h200-fourteenth/repro/common.sh
build_nccl_tests
LB='Latency/[0-9]+B/(eager|graph)$'
for k in 1 2; do
  s lat-new-$k 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
  s lat-old-$k 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/ctx/old
done
s lat-t128 30 env THESEUS_NTHREADS=128 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
s lat-t64 30 env THESEUS_NTHREADS=64 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
s gputests 100 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives' -test.v
s diff 60 $D/cuda.test -test.run 'TestDifferential/programs/(oneshot|direct|twoshot)/' -diff.sample=41 -diff.corpus=/nonexistent -test.v
s sweep-allreduce 110 bash $W/sweep2.sh -b 8 -e 1M -f 2 --coll allreduce --save $W/sweep-allreduce/sweep.json
s sweep-others 80 $D/theseus-bench sweep --backend cuda --nranks 2 -b 8 -e 1M -f 4 --coll allgather,reducescatter,alltoall --save $W/sweep-others/sweep.json
wait_nccl_tests
nccl_g01 60
summaries
echo "== +$(( $(date +%s) - T0 ))s done"
pack
