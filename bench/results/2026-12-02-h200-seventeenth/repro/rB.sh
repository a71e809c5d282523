#!/usr/bin/env bash
# Device call B (carry .device/f): lanes that carry traffic.
#   - the collectives' port channels spread over the lanes by pair ordinal (executor.laneAssign;
#     before, min(c, pc) mod N put the generators' ends 2k <-> 2k+1 on the even lanes only:
#     call A's connection counters);
#   - the point-to-point engine across nodes on every lane (channel ch on lane ch mod N; before,
#     one connection a peer);
# across 2 simulated nodes (UCX/TCP loopback), 2x1 and 2x2, 1, 2, 4 and 8 lanes, beside NCCL's
# socket transport in the same call; the GPU tests TestP2P (one node: the kernel's records changed).
CALL=rB
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
s gputests 60 $D/cuda.test -test.run 'TestP2P' -test.v
T5="all_reduce all_gather reduce_scatter alltoall sendrecv"
STEPS_=nccl nodes nccl 100 LAYOUTS="2x1 2x2" TESTS="$T5"
nodes lanes 330 LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l1 tcp-l2 tcp-l4 tcp-l8" TESTS="$T5"
for n in nccl lanes; do sed -E 's/.*INFO NET (rank [0-9]+).*\(to rank\(s\) (\[[0-9 ]*\]), tag ([0-9]+).*engine.s\): ([0-9]+) descriptors.*/\1 to \2 tag \3 desc \4/' $W/$n/closed.txt > $W/$n/desc.txt; done
echo "== +$(( $(date +%s) - T0 ))s done"
pack
