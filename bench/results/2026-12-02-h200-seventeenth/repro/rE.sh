#!/usr/bin/env bash
# Device call E (carry .device/f), the build of call D: the GPU tests that call D's bound cut
# short (TestDifferential took it all), with the prebuilt specialised kernels on (the default):
# graphs, runtime collectives, trace, persistent executor, shifted buffers, kernel modules,
# point-to-point; then nccl-tests' point-to-point tests at 2 and 4 ranks (#wrong).
CALL=rE
DEADLINE=${DEADLINE:-420}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
s gputests 200 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives|TestTrace|TestPersistent|TestShifted|TestKernelModules|TestP2P|TestLostPeer|TestSpecialized' -test.v
s nccl-p2p 120 env SIZES="-b 8 -e 1M -f 8" ITERS="-n 5 -w 2" NRANKS="2 4" MODES=ldpath TESTS="all_reduce sendrecv gather scatter hypercube alltoall alltoallv" THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
grep -h "^| ldpath" $W/nccl-p2p/nccl-tests/summary.md
grep -E "^--- (PASS|FAIL|SKIP)" $W/gputests/log.txt | sort | uniq -c | sort -rn | head -60
echo "== +$(( $(date +%s) - T0 ))s done"
pack
