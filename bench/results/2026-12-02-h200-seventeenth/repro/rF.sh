#!/usr/bin/env bash
# Device call F (carry .device/f): call E's build with TestShiftedBuffers' double destroy of its
# graph execs fixed (a deferred Destroy beside capture()'s cleanup: SIGSEGV in call E, after
# both phases passed), and the GPU tests call E's crash left unrun, specialised kernels on.
CALL=rF
DEADLINE=${DEADLINE:-300}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
s gputests 200 $D/cuda.test -test.run 'TestShiftedBuffers|TestTraceGPU|TestModuleLoad|TestResidentModule|TestReaper|TestIndependent|TestSharedUnits|TestWorldLoadsKernels|TestStreamLayout|TestQueueLayout|TestPTXDir|TestDefaultThreads|TestTableThreads' -test.v
grep -E "^--- (PASS|FAIL|SKIP)" $W/gputests/log.txt | sort | uniq -c | sort -rn | head -40
echo "== +$(( $(date +%s) - T0 ))s done"
pack
