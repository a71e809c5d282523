#!/usr/bin/env bash
# Device call A (2026-12-02, seventeenth run; carry .device/f, third_party), at 880fd7d:
#   1. what the sixteenth run changed without running it on the GPU: the GPU tests TestGraph,
#      TestRuntimeCollectives, TestP2P (one node); across 2 simulated nodes (UCX/TCP loopback)
#      all_reduce, alltoall, sendrecv at 2x1 and 2x2 (the residency fix: 2x2 alltoall at 128 MiB
#      hung before; port_put's review fixes);
#   2. the point-to-point engine's 8 B time by its channels (grid 2 x channels): nccl-tests
#      sendrecv 8 B - 64 KiB eager at 2 ranks with contexts giving 1, 2 and 8 channels, and the
#      built-in 32; 64 threads at 32 channels;
#   3. one node, no regression: BenchmarkLatency, all_reduce 128 MiB.
CALL=rA
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
s gputests 90 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives|TestP2P' -test.v
nodes nodes 200 LAYOUTS="2x1 2x2" TRANSPORTS="tcp" TESTS="all_reduce alltoall sendrecv"
p2pctx c1 '"channels":1'; p2pctx c2 '"channels":2'; p2pctx c8 '"channels":8'
for c in c1 c2 c8; do nt sr-$c sendrecv 0 "-b 8 -e 64K -f 4" THESEUS_SELECTION_CONTEXT=$W/ctx-$c; done
nt sr-c32 sendrecv 0 "-b 8 -e 64K -f 4"
nt sr-c32t64 sendrecv 0 "-b 8 -e 64K -f 4" THESEUS_NTHREADS=64
lat new
nt ar-128m all_reduce 0 "-b 128M -e 128M"
summaries
echo "== +$(( $(date +%s) - T0 ))s done"
pack
