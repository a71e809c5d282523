#!/usr/bin/env bash
# Device call E (2026-12-01, eleventh run; main after merging issue 24's integration and the
# point-to-point fix for PyTorch's unbatched isend/irecv that call D found): the point-to-point
# engine again (its GPU tests, PyTorch, the figures, a channels/threads sweep: issue 22);
# simulated nodes over UCX beside NCCL's socket transport (issue 24); small messages —
# BenchmarkLatency and nccl-tests 8 B / 32 KiB eager and -G 1 in launch mode, the persistent
# executor and specialised kernels (issue 25 items 3, 4); the allreduce crossover sweep (item 5).
# nccl-tests are built in the background (against Theseus and against the machine's NCCL).
# Carry .device/f and third_party.
CALL=rE
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/ 2>/dev/null
mkdir -p $W/build
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt
 bash $D/build_nccl_baseline.sh > $W/build/nccl.txt 2>&1; echo "nccl build rc=$?" >> $W/build/nccl.txt) &
PC=$D/p2p-contexts
s p2p 190 env STEPS="1 3 4 5" P2P_MOE=0 P2P_CONTEXTS="ch32=$PC/ch32 ch16-t1024=$PC/ch16-t1024 ch32-t1024=$PC/ch32-t1024" bash ncclabi/gpu/run_p2p.sh
wait; echo "== +$(( $(date +%s) - T0 ))s builds: $(tail -1 $W/build/theseus.txt); $(tail -1 $W/build/nccl.txt)"
s nodes 140 env LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l4 default" NT_SIZES="-b 8 -e 128M -f 16" NT_ITERS="-n 5 -w 2" bash bench/gpu/run-nodes.sh info nccl theseus
s calls-b 130 env PARTS="lat nccl" bash bench/gpu/small-calls-b.sh
s sweep 90 env PARTS="sweep" bash bench/gpu/small-messages.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
