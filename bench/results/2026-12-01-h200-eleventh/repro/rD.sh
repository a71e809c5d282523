#!/usr/bin/env bash
# Device call D (2026-12-01, eleventh run), the first of two back to back: the kernel modules'
# first load, graphs, every collective through the runtime and a differential sample at the
# merged main (issues 20-26); the point-to-point engine (issue 22); shrink, registration and
# buffer pairing (issue 26); the lost peer (issues 21, 26); PyTorch. Builds nccl-tests
# (against Theseus and against the machine's NCCL) in the background for both calls.
# Carry .device/f and third_party.
CALL=rD
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
cp $D/f/build_nccl_tests.sh $D/f/build_nccl_baseline.sh $D/ 2>/dev/null
mkdir -p $W/build
(bash $D/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "theseus build rc=$?" >> $W/build/theseus.txt) &
B1=$!
(bash $D/build_nccl_baseline.sh > $W/build/nccl.txt 2>&1; echo "nccl build rc=$?" >> $W/build/nccl.txt) &
C=$D/cuda.test
s modules 150 $C -test.run 'TestKernelModules|TestModuleLoad|TestResidentModule' -test.v
s kernel 100 $C -test.run 'TestGraph$|TestGraphReplay$|TestRuntimeCollectives|TestDifferential/programs/(ring|direct|oneshot|twoshot)/.*/n[24]$' -diff.sample=31 -diff.corpus=/nonexistent -test.v
wait $B1; echo "== +$(( $(date +%s) - T0 ))s nccl-tests (theseus): $(tail -1 $W/build/theseus.txt)"
s p2p 210 bash ncclabi/gpu/run_p2p.sh
s resilience 120 bash ncclabi/gpu/run_resilience.sh
s lostpeer 40 env ROUNDS=1 THESEUS_TIMEOUT=5000 bash ncclabi/gpu/run_lostpeer.sh
s torch 70 env NRANKS=2 bash ncclabi/gpu/run_torch_check.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
