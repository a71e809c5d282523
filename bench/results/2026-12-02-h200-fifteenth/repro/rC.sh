#!/usr/bin/env bash
# Device call C (2026-12-02, fifteenth run; carry .device/f, third_party): the final build (the
# launch bound at 512 threads, register-held LL groups, and the point-to-point host path as
# committed), the whole suite and the figures in one run:
#   1. BenchmarkLatency, this build against 12728ec's kernel (v/old) twice; the specialised
#      context's kernels on and off (THESEUS_SPECIALIZED=0);
#   2. GPU tests: TestGraph, TestRuntimeCollectives, TestResidentModule, TestPersistent, TestP2P*,
#      TestDifferentialSpecialized;
#   3. nccl-tests at 2 and 4 ranks under MPS: 6 collectives 8 B - 1 MiB (#wrong), all_reduce and
#      all_reduce 128 MiB (this build and v/old); sendrecv (#wrong only: its figures in call D);
#   4. PyTorch: torch_check.py at 2 ranks, torch_latency.py at 2 ranks.
CALL=rC
DEADLINE=${DEADLINE:-440}
source bench/results/2026-12-02-h200-fifteenth/repro/common.sh
tar xJf .device/f/spec.txz -C .device
build_nccl_tests
for k in 1 2; do lat new-$k; lat old-$k THESEUS_PTX_DIR=$D/v/old; done
s lat-spec 40 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/spec-context
s lat-spec-off 40 env THESEUS_SPECIALIZED=0 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/spec-context
s gputests 120 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives|TestResidentModule|TestPersistent|TestP2P' -test.v
s diff-spec 60 $D/cuda.test -test.run TestDifferentialSpecialized -diff.spec=$D/spec-context/schedules -test.v
wait_nccl_tests
s nccl-wrong 90 env SIZES="-b 8 -e 1M -f 4" ITERS="-n 5 -w 2" NRANKS="2 4" MODES=ldpath TESTS="all_reduce all_gather reduce_scatter alltoall broadcast reduce sendrecv" THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
nt nt-ar-g0 all_reduce 0
nt nt-ar-g1 all_reduce 1


s nt-128m 40 env SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce bash ncclabi/gpu/run_nccl_tests.sh
s nt-128m-old 40 env THESEUS_PTX_DIR=$D/v/old SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce bash ncclabi/gpu/run_nccl_tests.sh
s torch-lat 80 env NRANKS=2 bash ncclabi/gpu/run_torch_latency.sh
s torch 100 env NRANKS=2 bash ncclabi/gpu/run_torch_check.sh
summaries
grep -h "^| ldpath" $W/nccl-wrong/nccl-tests/summary.md
grep -h TORCHLAT $W/torch-lat/torch-latency/n2.txt
echo "== +$(( $(date +%s) - T0 ))s done"
pack
