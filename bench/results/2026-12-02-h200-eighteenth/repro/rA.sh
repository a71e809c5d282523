#!/usr/bin/env bash
# Device call A (eighteenth run; carry .device/f and third_party): diagnostics and checks.
#   1. nccl-tests built (Theseus's header and the machine's NCCL), returned as $OUT/nccl-bin.txz;
#      meanwhile the GPU tests the seventeenth run's last commits did not run on the GPU
#      (point-to-point, ports and lanes, graphs, runtime collectives);
#   2. PyTorch's per-call host cost (issue 25: eager against graph): 1 rank on PyTorch's own
#      NCCL and on Theseus, 2 ranks on Theseus, and a trace of 2 ranks' eager 8 B calls;
#   3. nccl-tests all_reduce and sendrecv 8 B - 2 KiB at -n 50 and -n 1000, eager and -G 1:
#      does the per-call time depend on the iterations (start-up skew between the processes)?
CALL=rA
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-02-h200-eighteenth/repro/common.sh
build_nccl_tests
s gputests 260 $D/cuda.test -test.run 'TestP2P|TestPort|TestGraph|TestRuntimeCollectives|TestKick|TestLane' -test.v -test.timeout 250s
wait_nccl_tests
s torch1-nccl 60 env REAL_NCCL=1 NRANKS=1 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
s torch1 60 env NRANKS=1 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
s torch2 60 env NRANKS=2 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
mkdir -p $W/torchtrace
s torch2-trace 60 env NRANKS=2 SIZES="8" THESEUS_TRACE=$W/torchtrace/t.%p.json bash ncclabi/gpu/run_torch_latency.sh
Z="-b 8 -e 2K -f 4"
ntn ar-n50-g0 all_reduce 0 "$Z" 50
ntn ar-n1000-g0 all_reduce 0 "$Z" 1000
ntn ar-n50-g1 all_reduce 1 "$Z" 50
ntn ar-n1000-g1 all_reduce 1 "$Z" 1000
ntn sr-n1000-g0 sendrecv 0 "$Z" 1000
ntn sr-n1000-g1 sendrecv 1 "$Z" 1000
summaries
grep -h "TORCHLAT\|served natively" $W/torch*/torch-latency/*.txt $W/torch*/log.txt 2>/dev/null | sort | uniq | head -40
grep -rh "served natively" $W/torch2/ 2>/dev/null | head -4
echo "== +$(( $(date +%s) - T0 ))s done"
pack
