#!/usr/bin/env bash
# Device call G4 (2026-12-01, twelfth run), at 01c32e4: the point-to-point engine after its
# port and helping paths became separate functions (p2p.cuh): ptxas's registers and spills of
# theseus_p2p before (b5f61b0's module, carried as .device/f/old_uint8.ptx) and now; the GPU
# tests (helping, across nodes in one process); nccl-tests' point-to-point tests at 2 and 4
# ranks eager and with -G 1 and the figures (run_p2p.sh steps 2 and 4); alltoall and sendrecv
# across simulated nodes. Carry .device/f and third_party.
CALL=rG4
DEADLINE=${DEADLINE:-400}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt) &
s ptxas 30 bash -c "for m in $D/f/old_uint8.ptx $ROOT/cuda/kernel/ptx/theseus_uint8.ptx; do echo \"== \$m\"; ptxas -arch=sm_90 -v -o /dev/null \$m 2>&1 | grep -A2 'theseus_p2p'; done"
s p2pgo 60 env STEPS="1" bash ncclabi/gpu/run_p2p.sh
s xnodego 80 env UCX_TLS=tcp MSCCLPP_SOCKET_IFNAME=lo bash -c "cd $D && timeout 75 ./cuda.test -test.v -test.count=1 -test.run 'TestP2PAcrossNodesGPU|TestP2PRecordsAcrossNodes' 2>&1 | grep -v '^\[' | tail -30"
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt)"
s p2p 120 env STEPS="2 4" P2P_MOE=0 DEADLINE=110 bash ncclabi/gpu/run_p2p.sh
s p2pnodes 60 env RESULTS=p2pnodes LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l4" TESTS="alltoall sendrecv" NT_SIZES="-b 8 -e 32M -f 4" NT_ITERS="-n 5 -w 2" DEADLINE=55 bash bench/gpu/run-nodes.sh theseus
echo "== +$(( $(date +%s) - T0 ))s done"
pack
