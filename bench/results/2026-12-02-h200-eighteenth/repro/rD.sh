#!/usr/bin/env bash
# Device call D (carry .device/f): the final product of this run.
#   1. the C launcher: replay_check; nccl-tests all_reduce 8 B - 64 KiB -n 1000, eager and -G 1
#      (issue 25's figures; repeats launched from C from 4 KiB); PyTorch latency (eager after a
#      capture of another size now launched from C too);
#   2. 8 B sendrecv -n 1000, eager and -G 1;
#   3. 2 simulated nodes x 1 rank over UCX/TCP: sendrecv and all_reduce (p2p_publish is shared
#      with the port path; the launch's wake of lane 0);
#   4. GPU tests: the prebuilt specialised kernels' differential test, point-to-point, graphs,
#      runtime collectives, the persistent executor, shifted buffers, trace.
CALL=rD
DEADLINE=${DEADLINE:-575}
source bench/results/2026-12-02-h200-eighteenth/repro/common.sh
s replay 60 bash ncclabi/gpu/run_replay_check.sh
ntn ar-g0 all_reduce 0 "-b 8 -e 64K -f 2" 1000
ntn ar-g1 all_reduce 1 "-b 8 -e 64K -f 2" 1000
s torch2 60 env NRANKS=2 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
ntn sr8-g0 sendrecv 0 "-b 8 -e 8" 1000
ntn sr8-g1 sendrecv 1 "-b 8 -e 8" 1000
nodes n2x1 70 LAYOUTS=2x1 TRANSPORTS=tcp-l4 TESTS="sendrecv all_reduce" NT_SIZES="-b 8 -e 4M -f 8"
summaries
grep -h "TORCHLAT" $W/torch*/torch-latency/*.txt
grep -rh "destroyed:" $W/torch2/torch-latency/*.txt $W/ar-g0/nccl-tests/logs/* 2>/dev/null | cut -d' ' -f6- | sort | uniq -c | head
grep -h "REPLAYCHECK\|launched from C" $W/replay/log.txt | head -8
s gputests 240 $D/cuda.test -test.run 'TestDifferentialPrebuilt|TestP2P|TestGraph|TestRuntimeCollectives|TestPersistent|TestShifted|TestTrace' -test.v -test.timeout 230s
grep -h "^--- FAIL\|^--- SKIP\|^ok\|^PASS\|^FAIL\|^DIFFPREBUILT" $W/gputests/log.txt | head
echo "== +$(( $(date +%s) - T0 ))s done"
pack
