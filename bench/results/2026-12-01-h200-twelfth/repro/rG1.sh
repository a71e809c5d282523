#!/usr/bin/env bash
# Device call G1 (2026-12-01, twelfth run): the floor of a 2-rank small call on one GPU
# (bench/gpu/floor.sh, issue 25), the GPU host's raw UCX put bandwidth and latency through
# the proxy (issue 24: the wire's ceiling over TCP loopback and over shared memory), the
# point-to-point engine's figures and a channel/threads sweep (issue 22), and nccl-tests
# built once and returned for the later calls (.device/nccl-bin). Carry .device/f and
# third_party.
CALL=rG1
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt
 bash $D/build_nccl_baseline.sh > $W/build/nccl.txt 2>&1; echo "nccl build rc=$?" >> $W/build/nccl.txt
 mkdir -p /tmp/nb/nccl-bin && cp -r $ROOT/build/nccl-tests /tmp/nb/nccl-bin/ && cp -r $ROOT/build/nccl-tests-nccl /tmp/nb/nccl-bin/ \
   && rm -f /tmp/nb/nccl-bin/*/build.log && tar czf $OUT/nccl-bin.tgz -C /tmp/nb nccl-bin) &
s floor 120 bash bench/gpu/floor.sh
cd $D
s ucxbench 150 bash -c 'export UCX_TLS=tcp; echo "== UCX_TLS=tcp"; timeout 70 ./proxy.test -test.run "^\$" -test.bench "Put" -test.benchtime 1s 2>&1 | grep -v "^\["; echo "== UCX defaults, shared memory allowed"; unset UCX_TLS; UCX_TLS=all UCX_MM_ERROR_HANDLING=y timeout 70 ./proxy.test -test.run "^\$" -test.bench "Put" -test.benchtime 1s 2>&1 | grep -v "^\["'
cd $ROOT
wait; echo "== +$(( $(date +%s) - T0 ))s build: $(tail -1 $W/build/theseus.txt) $(tail -1 $W/build/nccl.txt)"; ls -la $OUT
PC=$D/p2p-contexts
s p2p 230 env STEPS="4 5" P2P_CONTEXTS="ch64=$PC/ch64 ch32-t1024=$PC/ch32-t1024 ch32-t256=$PC/ch32-t256 ch4-t256=$PC/ch4-t256" bash ncclabi/gpu/run_p2p.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
