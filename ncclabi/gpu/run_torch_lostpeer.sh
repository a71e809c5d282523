#!/usr/bin/env bash
# run_torch_lostpeer.sh — PyTorch on Theseus (LD_AUDIT) when a rank dies:
# torch_lostpeer.py as 2 plain processes on ONE GPU under MPS, the last
# rank SIGKILLed mid-training-loop, ROUNDS times for each
# TORCH_NCCL_ASYNC_ERROR_HANDLING setting in HANDLING (default "unset 1 2":
# PyTorch's default, TearDown, CleanUpOnly). Issue 21's crash: the survivor
# raised DistBackendError, then died of SIGSEGV in one run of two.
#
#   ncclabi/gpu/run_torch_lostpeer.sh
#   ROUNDS=5 HANDLING="unset" ncclabi/gpu/run_torch_lostpeer.sh
#
# Success: in every run the victim dies of SIGKILL (rc 137) and the
# survivor exits 0 (it printed "raised DistBackendError" or another
# exception, and "exits"), or 134 (SIGABRT: PyTorch's watchdog tearing the
# process down, which the default handling may do); never 139 (SIGSEGV) or
# a hang. Results: $RESULTS/torch-lostpeer/*.txt and summary.md; the exit
# status is non-zero when any run failed.
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
export THESEUS_DEBUG=WARN THESEUS_DEBUG_SUBSYS=INIT THESEUS_TIMEOUT=${THESEUS_TIMEOUT:-20000}
PY=${PYTHON:-python3}
OUTD=$RESULTS/torch-lostpeer
mkdir -p "$OUTD"
SUMMARY=$OUTD/summary.md
echo "| handling | round | victim rc | survivor rc | survivor's last lines |" >"$SUMMARY"
echo "|---|---|---|---|---|" >>"$SUMMARY"
start_mps
trap stop_mps EXIT
fail=0
port=29611
for h in ${HANDLING:-unset 1 2}; do
  for r in $(seq "${ROUNDS:-3}"); do
    port=$((port + 1))
    out=$OUTD/h$h-r$r
    (
      set +e # the victim's and the survivor's exit statuses are what is measured
      if [ "$h" != unset ]; then export TORCH_NCCL_ASYNC_ERROR_HANDLING=$h; else unset TORCH_NCCL_ASYNC_ERROR_HANDLING; fi
      export LD_AUDIT="$PREFIX/lib/libtheseus_audit_nccl.so" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=2 LOCAL_RANK=0
      RANK=0 timeout 300 $PY "$ROOT/ncclabi/gpu/torch_lostpeer.py" >"$out.0" 2>&1 &
      p0=$!
      RANK=1 timeout 300 $PY "$ROOT/ncclabi/gpu/torch_lostpeer.py" >"$out.1" 2>&1
      rc1=$?
      wait $p0
      rc0=$?
      echo "$rc0 $rc1" >"$out.rc"
    )
    read -r rc0 rc1 <"$out.rc"
    last=$(grep -h "TORCHLOST rank 0" "$out.0" | tail -2 | tr '\n' ' ' | cut -c1-200 || true)
    echo "| $h | $r | $rc1 | $rc0 | $last |" >>"$SUMMARY"
    echo "handling=$h round $r: victim rc $rc1, survivor rc $rc0"
    grep -h "TORCHLOST\|Signal\|SIGSEGV\|Segmentation" "$out.0" | sed 's/^/  /' | head -12 || true
    if [ "$rc1" != 137 ] || { [ "$rc0" != 0 ] && [ "$rc0" != 134 ]; }; then fail=1; fi
  done
done
cat "$SUMMARY"
exit $fail
