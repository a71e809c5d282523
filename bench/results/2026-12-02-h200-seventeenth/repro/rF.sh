#!/usr/bin/env bash
# Device call F (carry .device/f): call E's build with TestShiftedBuffers' double destroy of its
# graph execs fixed (a deferred Destroy beside capture()'s cleanup: SIGSEGV in call E, after
# both phases passed), and the GPU tests call E's crash left unrun, specialised kernels on; then
# nccl-tests all_reduce at 8 ranks with the 8-rank prebuilt kernels on.
CALL=rF
DEADLINE=${DEADLINE:-170}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
s gputests 100 $D/cuda.test -test.run 'TestShiftedBuffers|TestTraceGPU|TestModuleLoad|TestResidentModule|TestReaper|TestIndependent|TestSharedUnits|TestWorldLoadsKernels|TestStreamLayout|TestQueueLayout|TestPTXDir|TestDefaultThreads|TestTableThreads' -test.v
# The 8-rank prebuilt kernels, never run before: nccl-tests all_reduce 8 B - 2 KiB at 8 ranks, on.
s ar8-spec 45 env SIZES="-b 8 -e 2K -f 4" ITERS="-n 20 -w 5" NRANKS=8 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT THESEUS_SPECIALIZED=1 bash ncclabi/gpu/run_nccl_tests.sh
summaries
grep -E "^--- (PASS|FAIL|SKIP)" $W/gputests/log.txt | sort | uniq -c | sort -rn | head -40
echo "== +$(( $(date +%s) - T0 ))s done"
pack
