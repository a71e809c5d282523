#!/usr/bin/env bash
# Device call E (2026-12-01, eleventh run), the second of two back to back (nccl-tests built by
# call D): small messages — the persistent executor and specialised kernels against launch mode
# and the generic kernel, the trace on and off, new buffers, nccl-tests eager against -G 1, the
# crossover sweep (issue 25); simulated nodes over UCX beside NCCL's socket transport (issue 24);
# nccl-tests' collectives on the final code (the whole suite's client part).
# Carry .device/f and third_party.
CALL=rE
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
[ -x $ROOT/build/nccl-tests/all_reduce_perf ] || { cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/; bash $D/build_nccl_tests.sh > $W/nt-build.txt 2>&1; }
s calls-b 200 bash bench/gpu/small-calls-b.sh
s messages 170 bash bench/gpu/small-messages.sh
s nodes 150 env LAYOUTS="2x1 2x2" TRANSPORTS="tcp-l4 default" NT_SIZES="-b 8 -e 128M -f 16" NT_ITERS="-n 5 -w 2" bash bench/gpu/run-nodes.sh info nccl theseus
s nccl-tests 45 env SIZES="-b 8 -e 64M -f 8" ITERS="-n 5 -w 2" NRANKS=2 MODES=ldpath TESTS="all_reduce all_gather reduce_scatter broadcast reduce" bash ncclabi/gpu/run_nccl_tests.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
