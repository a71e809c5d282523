#!/usr/bin/env bash
# run_torch_latency.sh - torch_latency.py (PyTorch all_reduce of a repeated
# tensor, eager against CUDA-graph-replayed, issue 25) on Theseus through
# LD_AUDIT, NRANKS processes (default 2) on ONE GPU under MPS.
#
#   ncclabi/gpu/run_torch_latency.sh
#   NRANKS=4 SIZES="8 65536" ncclabi/gpu/run_torch_latency.sh
#   REAL_NCCL=1 NRANKS=1 ncclabi/gpu/run_torch_latency.sh   # PyTorch's own NCCL, no Theseus
#
# REAL_NCCL=1 runs PyTorch's own NCCL (no LD_AUDIT): the baseline of
# PyTorch's per-call host cost (NCCL refuses several ranks on one GPU, so
# there with NRANKS=1).
#
# Results: $RESULTS/torch-latency/n<N>.txt (every rank's output; rank 0's
# TORCHLAT lines). Exits non-zero when a run fails or prints no figures.
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
export THESEUS_DEBUG_SUBSYS=${THESEUS_DEBUG_SUBSYS_LAT:-INIT}
NRANKS=${NRANKS:-2}
PY=${PYTHON:-python3}
OUTD=$RESULTS/torch-latency
mkdir -p "$OUTD"
start_mps
trap stop_mps EXIT
fail=0
for n in $NRANKS; do
  out=$OUTD/n$n${REAL_NCCL:+-nccl}.txt
  echo "== torch_latency, $n ranks"
  set +e
  audit="$PREFIX/lib/libtheseus_audit_nccl.so"
  [ -n "${REAL_NCCL:-}" ] && audit=
  LD_AUDIT="$audit" timeout ${TIMEOUT:-300} \
    $PY -m torch.distributed.run --standalone --nproc-per-node="$n" "$ROOT/ncclabi/gpu/torch_latency.py" >"$out" 2>&1
  rc=$?
  set -e
  grep "TORCHLAT" "$out" || true
  if [ "$rc" != 0 ] || ! grep -q "TORCHLAT done" "$out"; then fail=1; tail -20 "$out"; fi
done
exit $fail
