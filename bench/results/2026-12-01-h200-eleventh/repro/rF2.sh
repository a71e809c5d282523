#!/usr/bin/env bash
# Device call F2 (2026-12-01, eleventh run), the last: simulated nodes over UCX after the fix
# for UCX 1.16's protocols v2 (PROTO_ENABLE=n; issue 24) — nccl-tests all_reduce, all_gather
# and reduce_scatter on Theseus, 2 nodes x 1 and 2 nodes x 2 ranks, 4 proxy lanes over TCP and
# UCX's defaults (NCCL's socket rows are call E's); the point-to-point engine's GPU tests after
# the FIFO-room change (issue 22). Carry .device/f and third_party.
CALL=rF2
DEADLINE=${DEADLINE:-250}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt) &
s p2p 60 env STEPS="1" bash ncclabi/gpu/run_p2p.sh
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt)"
s nodes 170 env LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l4 default" TESTS="all_reduce all_gather reduce_scatter" NT_SIZES="-b 8 -e 128M -f 16" NT_ITERS="-n 5 -w 2" bash bench/gpu/run-nodes.sh info theseus
echo "== +$(( $(date +%s) - T0 ))s done"
pack
