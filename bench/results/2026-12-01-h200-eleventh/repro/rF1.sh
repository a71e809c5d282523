#!/usr/bin/env bash
# Device call F1 (2026-12-01, eleventh run): PyTorch point-to-point at 2 and 4 ranks and the
# sendrecv figures with the built-in 32/16 channels (issue 22); the machine's UCX 1.16 libraries
# packed for reproducing, on the development machine, the assertion that stopped call E's
# simulated nodes (tcp_ep.c:958, issue 24). Carry .device/f and third_party.
CALL=rF1
DEADLINE=${DEADLINE:-230}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/ucx $W/build
ucx_info -v > $W/ucx/version.txt 2>&1
(cd / && tar czf $W/ucx/ucx-libs.tgz $(ls -d lib/x86_64-linux-gnu/libuc[mpst]*.so* lib/x86_64-linux-gnu/ucx 2>/dev/null)) 2>> $W/ucx/version.txt
ls -la $W/ucx >> $W/ucx/version.txt
cp $D/f/build_nccl_tests.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt) &
s torch 100 env STEPS="1 3" bash ncclabi/gpu/run_p2p.sh
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt)"
s figures 90 env STEPS="4" P2P_MOE=0 bash ncclabi/gpu/run_p2p.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
