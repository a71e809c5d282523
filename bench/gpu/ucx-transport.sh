#!/usr/bin/env bash
# ucx-transport.sh — the UCX binding and the port-channel proxy
# (runtime/transport) against the GPU machine's UCX (1.16, not the CI's
# 1.13): the layout check (when UCX's headers are installed), every test of
# both packages over UCX_TLS=tcp on loopback, then the benchmarks over TCP
# and over UCX's default transports with shared memory allowed
# (UCX_MM_ERROR_HANDLING=y: shared memory is left out otherwise, since the
# proxy's endpoints ask for peer error handling). No GPU is used. Carry
# .device (bash bench/gpu/prepare.sh builds ucx.test and proxy.test there).
# About a minute. Success: "PASS" after each test binary, and the two
# benchmark tables; output in $OUT/ucx-transport.txt.
#
#   (device) bash bench/gpu/ucx-transport.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
OUTF=${OUT:-$ROOT/build}/ucx-transport.txt
mkdir -p "$(dirname "$OUTF")"
exec > >(tee "$OUTF") 2>&1
echo "commit $(cat "$D/COMMIT" 2>/dev/null)"; date -u; nproc
ldconfig -p | grep -E "libucp\.so|libucs\.so" || echo "libucp not in the loader cache"
command -v ucx_info >/dev/null && ucx_info -v
ls /usr/include/ucp/api/ucp.h 2>/dev/null || echo "no UCX headers: TestABILayout skips"
cd "$D"
export UCX_TLS=tcp
timeout 120 ./ucx.test -test.v -test.count=1 2>&1 | grep -v '^\[' | tail -40
timeout 240 ./proxy.test -test.v -test.count=1 2>&1 | grep -v '^\[' | grep -E '^(=== RUN|--- |PASS|FAIL|ok|    )' | tail -80
echo "== benchmarks, UCX_TLS=tcp (loopback)"
timeout 150 ./proxy.test -test.run '^$' -test.bench . -test.benchtime 2s 2>&1 | grep -v '^\['
echo "== benchmarks, UCX's default transports, shared memory allowed (UCX_TLS unset, UCX_MM_ERROR_HANDLING=y)"
unset UCX_TLS
UCX_TLS=all UCX_MM_ERROR_HANDLING=y timeout 150 ./proxy.test -test.run '^$' -test.bench . -test.benchtime 2s 2>&1 | grep -v '^\['
