#!/usr/bin/env bash
# Device call G5 (2026-12-01, twelfth run), at b926db8: raw UCX puts through the proxy on the
# GPU host after the waits' fix and the 256 KiB TCP segments (issue 24: the wire's ceiling,
# against call G1's 0.12 GB/s), and PyTorch's point-to-point on the engine with helping and
# the threads rule (issue 22: torch_p2p.py at 2 and 4 ranks, run_p2p.sh step 3). Carry .device/f.
CALL=rG5
DEADLINE=${DEADLINE:-300}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
cd $D
s ucxbench 100 bash -c 'export UCX_TLS=tcp; echo "== UCX_TLS=tcp"; timeout 45 ./proxy.test -test.run "^\$" -test.bench "Put" -test.benchtime 1s 2>&1 | grep -v "^\["; echo "== UCX defaults, shared memory allowed"; unset UCX_TLS; UCX_TLS=all UCX_MM_ERROR_HANDLING=y timeout 45 ./proxy.test -test.run "^\$" -test.bench "Put/" -test.benchtime 1s 2>&1 | grep -v "^\["'
cd $ROOT
s torch 200 env STEPS="3" DEADLINE=190 bash ncclabi/gpu/run_p2p.sh
echo "== +$(( $(date +%s) - T0 ))s done"
pack
