#!/usr/bin/env bash
# Device call D (carry .device/f): the prebuilt specialised kernels of the default context's
# one-channel LL allreduce at 2, 4 and 8 ranks (runtime/speckernels; before, the default context
# ran only the generic executor):
#   1. GPU tests with them on (the default): differential, graphs, runtime collectives, trace,
#      persistent, shifted buffers, specialised differential, point-to-point;
#   2. BenchmarkLatency with THESEUS_SPECIALIZED=1 and =0, interleaved, twice;
#   3. nccl-tests all_reduce 8 B - 64 KiB at 2 ranks under MPS, eager and -G 1, on and off;
#      4 ranks eager, on and off;
#   4. PyTorch all_reduce of a repeated tensor, eager against graph-replayed (2 ranks), on.
CALL=rD
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-02-h200-seventeenth/repro/common.sh
s gputests 200 $D/cuda.test -test.run 'TestDifferential|TestGraph|TestRuntimeCollectives|TestTrace|TestPersistent|TestShifted|TestKernelModules|TestP2P' -test.v
for i in 1 2; do lat spec-$i THESEUS_SPECIALIZED=1; lat gen-$i THESEUS_SPECIALIZED=0; done
Z="-b 8 -e 64K -f 2"
nt ar-spec-g0 all_reduce 0 "$Z" THESEUS_SPECIALIZED=1
nt ar-spec-g1 all_reduce 1 "$Z" THESEUS_SPECIALIZED=1
nt ar-gen-g0 all_reduce 0 "$Z" THESEUS_SPECIALIZED=0
nt ar-gen-g1 all_reduce 1 "$Z" THESEUS_SPECIALIZED=0
s ar4-spec 40 env SIZES="-b 8 -e 2K -f 4" ITERS="-n 50 -w 10" NRANKS=4 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT THESEUS_SPECIALIZED=1 bash ncclabi/gpu/run_nccl_tests.sh
s ar4-gen 40 env SIZES="-b 8 -e 2K -f 4" ITERS="-n 50 -w 10" NRANKS=4 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT THESEUS_SPECIALIZED=0 bash ncclabi/gpu/run_nccl_tests.sh
s torch-lat 80 env NRANKS=2 bash ncclabi/gpu/run_torch_latency.sh
summaries
grep -h TORCHLAT $W/torch-lat/torch-latency/n2.txt
grep -rh "specialised\|theseus_spec" $W/ar-spec-g0/nccl-tests/logs/* 2>/dev/null | head -3
echo "== +$(( $(date +%s) - T0 ))s done"
pack
