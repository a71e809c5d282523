#!/usr/bin/env bash
# Device call G6 (2026-12-01, twelfth run): the point-to-point kernel with a launch bound of
# 512 threads (up to 128 registers a thread instead of 64): ptxas's spills, the GPU tests,
# nccl-tests' point-to-point tests at 2 and 4 ranks eager and -G 1, and the figures
# (run_p2p.sh steps 1, 2 and 4). Built from the working tree on top of b5f0706 (uncommitted
# when run; committed after it). Carry .device/f and third_party.
CALL=rG6
DEADLINE=${DEADLINE:-330}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt) &
s ptxas 30 bash -c "ptxas -arch=sm_90 -v -o /dev/null $ROOT/cuda/kernel/ptx/theseus_uint8.ptx 2>&1 | grep -A2 \"entry function 'theseus_p2p'\""
s p2pgo 60 env STEPS="1" bash ncclabi/gpu/run_p2p.sh
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt)"
s p2p 120 env STEPS="2 4" P2P_MOE=0 DEADLINE=110 bash ncclabi/gpu/run_p2p.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
