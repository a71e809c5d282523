#!/usr/bin/env bash
# Device call D (2026-12-02, fifteenth run; carry .device/f, third_party): after call C,
#   1. the capture fix (a stream first seen during a capture): TestGraphCaptureFreshStream and
#      PyTorch's torch_latency.py (eager against CUDA-graph-replayed all_reduce, 2 ranks);
#   2. the specialised kernels: TestDifferentialSpecialized with bundles built by 12728ec's
#      theseusc (spec-old) and by this build's (spec), to tell whether call C's failure is new;
#   3. the point-to-point host path (p2p-host: launches rebased to new buffers): TestP2P*, nccl-tests
#      sendrecv 8 B - 64 KiB eager and -G 1, and sendrecv, gather, scatter, hypercube, alltoall,
#      alltoallv at 2 and 4 ranks (#wrong); PyTorch's point-to-point checks (run_p2p.sh step 3).
CALL=rD
DEADLINE=${DEADLINE:-380}
source bench/results/2026-12-02-h200-fifteenth/repro/common.sh
tar xJf .device/f/spec.txz -C .device
build_nccl_tests
s gputests 60 $D/cuda.test -test.run 'TestGraphCaptureFreshStream|TestP2P' -test.v
s diff-spec-old 45 $D/cuda.test -test.run TestDifferentialSpecialized -diff.spec=$D/spec-old/schedules -test.v
s diff-spec 45 $D/cuda.test -test.run TestDifferentialSpecialized -diff.spec=$D/spec-context/schedules -test.v
wait_nccl_tests
s torch-lat 70 env NRANKS=2 bash ncclabi/gpu/run_torch_latency.sh
nt nt-sr-g0 sendrecv 0
nt nt-sr-g1 sendrecv 1
nt nt-ar-g0 all_reduce 0
s nccl-p2p 80 env SIZES="-b 8 -e 1M -f 8" ITERS="-n 5 -w 2" NRANKS="2 4" MODES=ldpath TESTS="sendrecv gather scatter hypercube alltoall alltoallv" THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
s torch-p2p 70 env STEPS=3 bash ncclabi/gpu/run_p2p.sh
summaries
grep -h "^| ldpath" $W/nccl-p2p/nccl-tests/summary.md
grep -h TORCHLAT $W/torch-lat/torch-latency/n2.txt
echo "== +$(( $(date +%s) - T0 ))s done"
pack
