#!/usr/bin/env bash
# Device call G2a (2026-12-01, twelfth run), at a459371: the point-to-point engine's GPU
# tests with idle lanes helping the direct copy (issue 22), the CUDA engine across simulated
# nodes through the proxy in one process (issue 24), and the executor's synchronisation
# variants (issue 25: bench/gpu/latency-variants.sh), while nccl-tests build for call G2b on
# the same warm machine. Carry .device/f and third_party.
CALL=rG2a
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt
 bash $D/build_nccl_baseline.sh > $W/build/nccl.txt 2>&1; echo "nccl build rc=$?" >> $W/build/nccl.txt) &
s p2pgo 130 env STEPS="1" bash ncclabi/gpu/run_p2p.sh
s xnodego 100 env UCX_TLS=tcp MSCCLPP_SOCKET_IFNAME=lo bash -c "cd $D && timeout 90 ./cuda.test -test.v -test.count=1 -test.run 'TestP2PAcrossNodesGPU|TestP2PRecordsAcrossNodes|TestP2PContract' 2>&1 | grep -v '^\[' | tail -60"
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt) $(tail -1 $W/build/nccl.txt)"
s lat 250 bash bench/gpu/latency-variants.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
