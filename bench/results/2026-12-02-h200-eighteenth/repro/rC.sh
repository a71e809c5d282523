#!/usr/bin/env bash
# Device call C (carry .device/f): the p2p kernel without fence.sc.sys on a node and the C
# launcher's 320-byte entries, on the GPU:
#   1. issue 22's acceptance (ncclabi/gpu/run_p2p.sh steps 1-4: GPU tests, nccl-tests sendrecv,
#      gather, scatter, hypercube, alltoall, alltoallv at 2 and 4 ranks eager and -G 1, PyTorch,
#      the figures in one run);
#   2. 8 B sendrecv and all_reduce alone, -n 1000, eager and -G 1;
#   3. the C launcher: replay_check, nccl-tests all_reduce 4 KiB - 64 KiB, PyTorch latency;
#   4. 2 simulated nodes x 1 rank, sendrecv over UCX/TCP (p2p_publish is shared with the port path);
#   5. the specialised differential test and the graph tests.
CALL=rC
DEADLINE=${DEADLINE:-575}
source bench/results/2026-12-02-h200-eighteenth/repro/common.sh
s p2p 280 env STEPS="1 2 3 4" THESEUS_PREFIX=$D/prefix bash ncclabi/gpu/run_p2p.sh
ntn sr8-g0 sendrecv 0 "-b 8 -e 8" 1000
ntn sr8-g1 sendrecv 1 "-b 8 -e 8" 1000
ntn ar8-g0 all_reduce 0 "-b 8 -e 8" 1000
ntn ar8-g1 all_reduce 1 "-b 8 -e 8" 1000
s replay 60 bash ncclabi/gpu/run_replay_check.sh
ntn ar-4k all_reduce 0 "-b 4K -e 64K -f 2" 200
s torch2 60 env NRANKS=2 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
nodes n2x1 60 LAYOUTS=2x1 TRANSPORTS=tcp-l4 TESTS=sendrecv NT_SIZES="-b 8 -e 1M -f 8"
summaries
grep -h "TORCHLAT" $W/torch*/torch-latency/*.txt
grep -rh "destroyed:" $W/torch2/torch-latency/*.txt $W/ar-4k/nccl-tests/logs/* 2>/dev/null | cut -d' ' -f6- | sort | uniq -c | head
grep -h "REPLAYCHECK\|launched from C" $W/replay/log.txt | head -8
grep -h "GB/s\|goal\|us\b" $W/p2p/p2p/summary.md 2>/dev/null | head -30
s gputests 200 $D/cuda.test -test.run 'TestDifferentialSpecialized|TestGraph' -test.v -test.timeout 190s
grep -h "^--- FAIL\|^ok\|^PASS\|^FAIL" $W/gputests/log.txt | head
echo "== +$(( $(date +%s) - T0 ))s done"
pack
