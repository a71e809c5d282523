#!/usr/bin/env bash
# Device call E (2026-12-02, fifteenth run; carry .device/f): call D's GPU tests again after the
# test's own cleanup order was fixed (TestGraphCaptureFreshStream destroyed its streams before
# the communicators, which then waited on them): TestGraphCaptureFreshStream and TestP2P* (the
# point-to-point engine's GPU tests, TestP2PShiftedGPU among them); ptxas -v of theseus_p2p.
CALL=rE
DEADLINE=${DEADLINE:-150}
source bench/results/2026-12-02-h200-fifteenth/repro/common.sh
mkdir -p $W/ptxas
(/usr/local/cuda/bin/ptxas -arch=sm_90 -v cuda/kernel/ptx/theseus_uint8.ptx -o /dev/null > $W/ptxas/uint8.txt 2>&1) &
s gputests 110 $D/cuda.test -test.run 'TestGraphCaptureFreshStream|TestP2P' -test.v
wait
echo "PTXAS theseus_p2p: $(grep -A3 "Compiling entry function 'theseus_p2p'" $W/ptxas/uint8.txt | grep -o '[0-9]* bytes stack frame.*\|Used [0-9]* registers' | tr '\n' ' ')"
grep -E "^(--- FAIL|--- PASS|ok|FAIL|PASS)" $W/gputests/log.txt | sort | uniq -c | sort -rn | head -40
echo "== +$(( $(date +%s) - T0 ))s done"
pack
