#!/usr/bin/env bash
# The LL launch fence on the GPU (issues 24 and 25): self-fenced LL schedules (the default
# context's one-shot allreduce, all-pairs allgather and reduce-scatter: docs/executor.md,
# "Fences") are no longer fenced at repeated launches; THESEUS_LL_FENCE=1 fences them as
# before. One device call, carrying .device/f (bench/gpu/prepare.sh) and third_party
# (nccl-tests source): source a call's common file (for example
# bench/results/2026-12-01-h200-eleventh/repro/final-common.sh, with CALL set) first, then
# this file runs, each bounded:
#   1. cuda.test's runtime, graph and differential tests (TestRuntimeCollectives, TestGraph*, TestDifferential) with the fence
#      off (default) and on: PASS both;
#   2. BenchmarkLatency 8 B / 2 KiB / 32 KiB eager and graph, fence off and on, interleaved
#      twice: the gain is the "off" row's time below the "on" row's;
#   3. 2 simulated nodes x 1 and x 2 (run-nodes.sh): all_reduce, all_gather, reduce_scatter at
#      8 B..128 MiB, Theseus tcp-l4 and tcp-l4-llfence beside NCCL's socket transport:
#      #wrong 0 everywhere; the 8 B rows are issue 24's latency goal (<= NCCL's).
# Success: no FAIL lines, every rc=0, every #wrong 0.
: "${D:?source a call's common file first (it sets D, W, s and pack)}"
B='Latency/(8B|2048B|32768B)/(eager|graph)$'
s gputests-off 120 $D/cuda.test -test.run 'TestRuntimeCollectives|TestGraph|TestDifferential$' -test.count 1
s gputests-on 120 env THESEUS_LL_FENCE=1 $D/cuda.test -test.run 'TestRuntimeCollectives|TestGraph|TestDifferential$' -test.count 1
for k in 1 2; do
  s lat-off-$k 40 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x
  s lat-on-$k 40 env THESEUS_LL_FENCE=1 $D/cuda.test -test.run xxx -test.bench "$B" -test.benchtime 1000x
done
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/
s build 150 bash -c "bash $D/build_nccl_tests.sh && bash $D/build_nccl_baseline.sh"
s nodes-2x1 150 env RESULTS=nodes-2x1 LAYOUTS=2x1 TESTS="all_reduce all_gather reduce_scatter" TRANSPORTS="tcp-l4 tcp-l4-llfence" NT_SIZES="-b 8 -e 128M -f 8" NT_ITERS="-n 5 -w 2" DEADLINE=140 bash bench/gpu/run-nodes.sh nccl theseus
s nodes-2x2 120 env RESULTS=nodes-2x2 LAYOUTS=2x2 TESTS="all_reduce all_gather reduce_scatter" TRANSPORTS="tcp-l4 tcp-l4-llfence" NT_SIZES="-b 8 -e 128M -f 8" NT_ITERS="-n 5 -w 2" DEADLINE=110 bash bench/gpu/run-nodes.sh nccl theseus
echo "== +$(( $(date +%s) - T0 ))s done"
pack
