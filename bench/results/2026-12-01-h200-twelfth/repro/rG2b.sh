#!/usr/bin/env bash
# Device call G2b (2026-12-01, twelfth run), right after G2a on the same warm machine (its
# nccl-tests builds in build/ kept): nccl-tests' point-to-point tests at 2 and 4 ranks eager
# and with -G 1, and the figures with helping and the threads rule on and off in one run
# (issue 22: ncclabi/gpu/run_p2p.sh steps 2 and 4); nccl-tests alltoall and sendrecv across
# simulated nodes on the CUDA engine through the proxy (issue 24: run-nodes.sh, 2x1 and 2x2,
# UCX over TCP). Carry .device/f and third_party.
CALL=rG2b
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
ls build/nccl-tests/*_perf >/dev/null 2>&1 || { echo "no nccl-tests build kept: building"; cp $D/f/build_nccl_tests.sh $D/; bash $D/build_nccl_tests.sh > $W/build.txt 2>&1; }
s p2p 330 env STEPS="2 4" DEADLINE=320 bash ncclabi/gpu/run_p2p.sh
s p2pnodes 200 env LAYOUTS="2x1 2x2" TRANSPORTS=tcp TESTS="alltoall sendrecv" NT_SIZES="-b 8 -e 32M -f 4" NT_ITERS="-n 5 -w 2" bash bench/gpu/run-nodes.sh info theseus
echo "== +$(( $(date +%s) - T0 ))s done"
pack
