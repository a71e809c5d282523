#!/usr/bin/env bash
# Device call C (carry .device/f): the lanes by distinct pair of ends (a channel and its reverse
# on one lane, each direction's data on every lane; call B's rule put one direction on the even
# lanes, the other on the odd ones), across 2 simulated nodes (UCX/TCP loopback), beside NCCL's
# socket transport: every test at 2x1 (2 and 4 lanes) and 2x2 (2 lanes, the default); then
# 2x1 all_reduce at 32-128 MiB with knobs: THESEUS_SLICE_BYTES=4MB, UCX_TCP_SNDBUF/RCVBUF=8MB,
# 6 lanes.
CALL=rC
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
T5="all_reduce all_gather reduce_scatter alltoall sendrecv"
STEPS_=nccl nodes nccl 100 LAYOUTS="2x1 2x2" TESTS="$T5"
nodes th 200 LAYOUTS="2x1" TRANSPORTS="tcp-l2 tcp" TESTS="$T5"
nodes th22 100 LAYOUTS="2x2" TRANSPORTS="tcp" TESTS="$T5"
B="-b 32M -e 128M -f 2"
nodes slice4m 40 LAYOUTS="2x1" TRANSPORTS="tcp" TESTS="all_reduce all_gather" NT_SIZES="$B" THESEUS_SLICE_BYTES=4MB
nodes sock8m 40 LAYOUTS="2x1" TRANSPORTS="tcp" TESTS="all_reduce all_gather" NT_SIZES="$B" UCX_TCP_SNDBUF=8MB UCX_TCP_RCVBUF=8MB
nodes l6 40 LAYOUTS="2x1" TRANSPORTS="tcp-l6" TESTS="all_reduce all_gather sendrecv" NT_SIZES="$B"
for n in th th22; do sed -E 's/.*INFO NET (rank [0-9]+).*\(to rank\(s\) (\[[0-9 ]*\]), tag ([0-9]+).*engine.s\): ([0-9]+) descriptors.*/\1 to \2 tag \3 desc \4/' $W/$n/closed.txt > $W/$n/desc.txt; done
echo "== +$(( $(date +%s) - T0 ))s done"
pack
