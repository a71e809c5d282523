#!/usr/bin/env bash
# Device call B (carry .device/f; .device/f/v.txz holds .device/v): why no call is launched from C (call A: "0 of them
# launched from C" everywhere, PyTorch included; the destroy line now says why), the
# point-to-point kernel's variants at 8 B (repro/p2p-variants.sh), and the GPU suite with the
# prebuilt specialised kernels (differential included).
CALL=rB
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-02-h200-eighteenth/repro/common.sh
tar xJf $D/f/v.txz -C $D
s torch1 60 env NRANKS=1 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
s torch2 60 env NRANKS=2 SIZES="8 2048 65536" bash ncclabi/gpu/run_torch_latency.sh
ntn ar-4k all_reduce 0 "-b 4K -e 64K -f 2" 200
for v in base nofence nopost empty; do ntn sr-$v sendrecv 0 "-b 8 -e 8" 1000 THESEUS_PTX_DIR=$D/v/$v; done
ntn sr-product sendrecv 0 "-b 8 -e 8" 1000
summaries
grep -h "TORCHLAT" $W/torch*/torch-latency/*.txt
grep -rh "destroyed:" $W/torch*/torch-latency/*.txt $W/ar-4k/nccl-tests/logs/* 2>/dev/null | cut -d' ' -f6- | sort | uniq -c | head
s gputests 300 $D/cuda.test -test.run 'TestDifferential|TestTrace|TestPersistent|TestShifted|TestKernelModules|TestSpecial' -test.v -test.timeout 290s
grep -h "^--- FAIL\|^ok\|^PASS\|^FAIL" $W/gputests/log.txt | head
echo "== +$(( $(date +%s) - T0 ))s done"
pack
