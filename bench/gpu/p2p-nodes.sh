#!/usr/bin/env bash
# p2p-nodes.sh — issue 24's point-to-point across simulated nodes on one H200:
# the CUDA kernel's engine posting to the proxy's FIFO (docs/p2p.md, "Across
# nodes"). ONE device call (nvidia-h200), carrying .device and third_party,
# under 3 minutes; results packed into $OUT/p2p-nodes.tgz.
#
#   (here)   bash bench/gpu/prepare.sh     # .device: cuda.test, prefix, COMMIT
#            (and the lead's .device/build_nccl_tests.sh, as for run-nodes.sh)
#   (device) bash bench/gpu/p2p-nodes.sh
#
# Steps:
#   1. cuda.test -test.run 'TestP2PAcrossNodesGPU|TestP2PRecordsAcrossNodes|
#      TestP2PContract' (2 nodes of 2 ranks as goroutines, UCX_TLS=tcp: ring,
#      24 MiB ring, all-pairs, AlltoAllv, a mismatch across nodes), while
#      nccl-tests build against Theseus in the background (skipped when
#      .device/nccl-bin/nccl-tests is carried)
#   2. bench/gpu/run-nodes.sh info theseus with LAYOUTS="2x1 2x2"
#      TRANSPORTS="${P2P_TRANSPORTS:-tcp}" TESTS="alltoall sendrecv"
#      NT_SIZES="-b 8 -e 32M -f 4" NT_ITERS="-n 5 -w 2": processes under MPS,
#      each its own MSCCLPP_HOSTID, nccl-tests -c 1
#
# Success: the last line is "P2PNODES PASS" and the exit status 0: the Go
# test printed "--- PASS: TestP2PAcrossNodesGPU" and every Theseus row of
# run-nodes.sh's summary (4 with the default transport) has exit 0 and
# #wrong 0. Otherwise "P2PNODES FAIL: <what>" and the logs in the tarball
# (go.txt; nodes/summary.md, nodes/runs/*, nodes/logs/* with the INIT lines).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/p2p-nodes.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL"
pack() { tar czf "$FINAL/p2p-nodes.tgz.tmp" -C "$R" . && mv "$FINAL/p2p-nodes.tgz.tmp" "$FINAL/p2p-nodes.tgz"; }
trap pack EXIT
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0
T0=$(date +%s)
log() { echo "== +$(($(date +%s) - T0))s $*" | tee -a "$R/steps.txt"; }
fail=()

bpid=
if [ ! -x "$D/nccl-bin/nccl-tests/sendrecv_perf" ] && [ ! -x "$ROOT/build/nccl-tests/sendrecv_perf" ]; then
  (cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
    THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/build.txt" 2>&1 &
  bpid=$!
  log "nccl-tests build started"
fi

log "go: cuda.test across nodes"
(cd "$ROOT/cuda" && UCX_TLS=${UCX_TLS:-tcp} timeout 100 "$D/cuda.test" -test.v -test.timeout 90s \
  -test.run 'TestP2PAcrossNodesGPU|TestP2PRecordsAcrossNodes|TestP2PContract') >"$R/go.txt" 2>&1
echo "go rc=$?" >>"$R/go.txt"
grep -E "^(--- |PASS|FAIL|ok |go rc)" "$R/go.txt" | tee -a "$R/steps.txt"
grep -q -- "--- PASS: TestP2PAcrossNodesGPU" "$R/go.txt" || fail+=("TestP2PAcrossNodesGPU")
pack

if [ -n "$bpid" ]; then
  wait "$bpid"
  log "nccl-tests build rc=$?"
fi
log "nccl-tests alltoall and sendrecv across nodes"
mkdir -p "$R/nodes"
OUT=$R/nodes DEADLINE=$((170 - ($(date +%s) - T0))) LAYOUTS="2x1 2x2" TRANSPORTS="${P2P_TRANSPORTS:-tcp}" TESTS="alltoall sendrecv" \
  NT_SIZES="-b 8 -e 32M -f 4" NT_ITERS="-n 5 -w 2" bash "$ROOT/bench/gpu/run-nodes.sh" info theseus >"$R/nodes/log.txt" 2>&1
tar xzf "$R/nodes/nodes-results.tgz" -C "$R/nodes" 2>/dev/null && rm -f "$R/nodes/nodes-results.tgz"
rows=$(grep -c '^| theseus ' "$R/nodes/summary.md" 2>/dev/null)
bad=$(awk -F'|' '/^\| theseus /{ rc=$6; w=$7; gsub(/ /, "", rc); gsub(/ /, "", w); if (rc != "0" || w != "0") n++ } END { print n+0 }' "$R/nodes/summary.md" 2>/dev/null)
grep '^| theseus ' "$R/nodes/summary.md" 2>/dev/null | tee -a "$R/steps.txt"
[ "${rows:-0}" -ge 1 ] || fail+=("no nccl-tests rows")
[ "${bad:-1}" = 0 ] || fail+=("$bad nccl-tests rows with an error or #wrong")
if [ ${#fail[@]} -eq 0 ]; then
  log "P2PNODES PASS"
  echo "P2PNODES PASS"
  exit 0
fi
log "P2PNODES FAIL: ${fail[*]}"
echo "P2PNODES FAIL: ${fail[*]}"
exit 1
