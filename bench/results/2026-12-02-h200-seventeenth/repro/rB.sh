#!/usr/bin/env bash
# Device call B (carry .device/f): the lanes of port channels spread by pair ordinal
# (executor.portLanes; before, min(c, pc) mod N put the generators' ends 2k <-> 2k+1 on the
# even lanes only: call A's connection counters): across 2 simulated nodes (UCX/TCP loopback)
# all_reduce, all_gather, reduce_scatter at 2x1 and 2x2 with 1, 2, 4 and 8 lanes, beside
# NCCL's socket transport in the same call.
CALL=rB
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
T3="all_reduce all_gather reduce_scatter"
STEPS_=nccl nodes nccl 120 LAYOUTS="2x1 2x2" TESTS="$T3 alltoall sendrecv"
nodes lanes 300 LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l1 tcp-l2 tcp-l4 tcp-l8" TESTS="$T3"
for n in nccl lanes; do sed -E 's/.*INFO NET (rank [0-9]+).*\(to rank\(s\) (\[[0-9 ]*\]), tag ([0-9]+).*engine.s\): ([0-9]+) descriptors.*/\1 to \2 tag \3 desc \4/' $W/$n/closed.txt > $W/$n/desc.txt; done
echo "== +$(( $(date +%s) - T0 ))s done"
pack
