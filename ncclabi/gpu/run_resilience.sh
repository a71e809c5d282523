#!/usr/bin/env bash
# run_resilience.sh — issue 26 on one GPU (several ranks as processes under
# MPS), through the NCCL ABI: ncclabi/testdata/ctest/resilience.c on the CUDA
# backend (RES_CUDA=1), built here with the system compiler against the
# installed nccl.h (it reaches the driver through dlopen, no CUDA headers),
# then PyTorch with a rank killed and the survivors shrinking it away.
#
#   THESEUS_PREFIX=.device/prefix bash ncclabi/gpu/run_resilience.sh
#   SKIP_TORCH=1 ...        the C checks only
#   RES_BACKEND=host ...    the same C checks on the host backend (to check
#                           the script on a machine without a GPU)
#
# Runs (each bounded; THESEUS_TIMEOUT=20000):
#   shrink kill:1 on 2 ranks; kill:3, exclude:3 and kill:0 on 4 ranks — the
#     survivors get an error within the timeout, shrink the victim away
#     (NCCL_SHRINK_ABORT / NCCL_SHRINK_DEFAULT), run every collective on the
#     new communicator (#wrong 0), abort or destroy the parent;
#   register on 2 and 4 ranks — ncclCommRegister/Deregister native (no
#     fallback), the buffer freed and allocated again after deregistration;
#   pairing on 2 and 4 ranks — rank 0 keeps its buffers, the others move
#     every call (Known Issue 3 turned around), every result exact.
# The context is the default one plus a generated one-shot Simple allreduce
# (up to 256 KiB) that reads the peers' buffers, so that registration and
# pairing exercise the CUDA side of executor level L2 (the kernel's pairing
# wait, the channel records rewritten in place).
#
# Success: every run prints "RESULT <name> PASS" (the killed rank dies of
# SIGKILL, every other rank exits 0 after "PASS <mode> rank R"), and the
# last line is "RESILIENCE PASS". PyTorch (torch_shrink.py, 3 ranks, the
# last killed): "TORCHSHRINK" lines; PASS when the survivors got an error
# and continued with exact all_reduce results: through shrink_group, or, when
# PyTorch refuses the shrink (it checks ncclGetVersion() >= 2.27, and Theseus
# reports 2.25.1), on a process group re-initialised without the victim —
# the summary says which. Results:
# $RESULTS/resilience/*.txt and summary.md.
source "$(dirname "$0")/common.sh"
set +e # each run's failure is recorded, not fatal
need_prefix
theseus_env
export THESEUS_DEBUG=WARN THESEUS_DEBUG_SUBSYS=INIT THESEUS_TIMEOUT=${THESEUS_TIMEOUT:-20000} RES_CUDA=1
OUTD=$RESULTS/resilience
mkdir -p "$OUTD"
SUMMARY=$OUTD/summary.md
echo "| run | ranks | result | ranks' lines |" >"$SUMMARY"
echo "|---|---|---|---|" >>"$SUMMARY"
W=$(mktemp -d /tmp/resilience.XXXXXX)
cc -O2 -Wall -pthread -I"$PREFIX/include" -o "$W/resilience" "$ROOT/ncclabi/testdata/ctest/resilience.c" \
  -L"$PREFIX/lib" -ltheseus_nccl -Wl,-rpath,"$PREFIX/lib" -ldl || exit 2
CTX=$W/context
cp -r "$ROOT/examples/contexts/default" "$CTX"
echo '{"gen":"oneshot","protocol":"simple","collective":"allreduce","max_bytes":262144,"usable":"nranks > 1","preference":"40","name":"allreduce_oneshot_simple","comment":"run_resilience.sh: reads the peers buffers"}' >>"$CTX/schedule_manifest.jsonl"
export THESEUS_SELECTION_CONTEXT=$CTX
if [ "${RES_BACKEND:-cuda}" = host ]; then
  export THESEUS_BACKEND=host RES_CUDA=0 SKIP_TORCH=1
else
  start_mps
  trap stop_mps EXIT
fi

# run_ranks NAME N VICTIM MODE ARG: N processes of resilience MODE ARG (rank 0
# first; its "ID" line goes to the others), each bounded to 150 s; VICTIM is
# the rank expected to die of SIGKILL (-1: none).
fail=0
run_ranks() {
  local name=$1 n=$2 victim=$3 mode=$4 arg=$5 out=$OUTD/$1
  timeout 150 "$W/resilience" "$mode" "$arg" 0 "$n" >"$out.0" 2>&1 &
  local pids=($!) id=
  for _ in $(seq 600); do
    id=$(sed -n 's/^ID //p' "$out.0")
    [ -n "$id" ] && break
    kill -0 "${pids[0]}" 2>/dev/null || break
    sleep 0.1
  done
  if [ -z "$id" ]; then
    echo "$name: rank 0 printed no id"
    tail -5 "$out.0"
    wait "${pids[0]}"
    fail=1
    echo "| $name | $n | FAIL (no id) | |" >>"$SUMMARY"
    return
  fi
  for r in $(seq 1 $((n - 1))); do
    timeout 150 "$W/resilience" "$mode" "$arg" "$r" "$n" "$id" >"$out.$r" 2>&1 &
    pids+=($!)
  done
  local ok=1 lines=
  for r in $(seq 0 $((n - 1))); do
    wait "${pids[$r]}"
    local rc=$?
    if [ "$r" = "$victim" ]; then
      [ "$rc" = 137 ] || { ok=0; echo "  rank $r (victim): rc $rc, want 137 (SIGKILL)"; }
      continue
    fi
    if [ "$rc" != 0 ] || grep -q "^FAIL" "$out.$r" || ! grep -q "^PASS " "$out.$r"; then
      ok=0
      echo "  rank $r: rc $rc"
      grep -h "^FAIL" "$out.$r" | head -3 | sed 's/^/    /'
    fi
    lines="$lines $(grep -h -E '^(SHRINK|REGISTER|PAIRING) rank [0-9]+: ' "$out.$r" | tail -1 | tr '|' '/')"
  done
  local res=PASS
  [ "$ok" = 1 ] || { res=FAIL; fail=1; }
  echo "RESULT $name $res"
  grep -h -E "^(SHRINK|REGISTER|PAIRING)" "$out".* | sed 's/^/  /'
  echo "| $name | $n | $res | ${lines:0:400} |" >>"$SUMMARY"
}

run_ranks shrink-kill1-n2 2 1 shrink kill:1
run_ranks shrink-kill3-n4 4 3 shrink kill:3
run_ranks shrink-exclude3-n4 4 -1 shrink exclude:3
run_ranks shrink-kill0-n4 4 0 shrink kill:0
run_ranks register-n2 2 -1 register -
run_ranks register-n4 4 -1 register -
run_ranks pairing-n2 2 -1 pairing 4099
run_ranks pairing-n4 4 -1 pairing 4099

if [ -z "${SKIP_TORCH:-}" ] && python3 -c "import torch" 2>/dev/null; then
  PY=${PYTHON:-python3}
  port=29711
  out=$OUTD/torch-shrink
  (
    export LD_AUDIT="$PREFIX/lib/libtheseus_audit_nccl.so" MASTER_ADDR=127.0.0.1 MASTER_PORT=$port WORLD_SIZE=3 LOCAL_RANK=0
    export TORCH_NCCL_ASYNC_ERROR_HANDLING=0 THESEUS_SELECTION_CONTEXT=$ROOT/examples/contexts/default
    for r in 0 1 2; do
      RANK=$r timeout 240 $PY "$ROOT/ncclabi/gpu/torch_shrink.py" >"$out.$r" 2>&1 &
      eval "p$r=\$!"
    done
    wait "$p0"; rc0=$?
    wait "$p1"; rc1=$?
    wait "$p2"; rc2=$?
    echo "$rc0 $rc1 $rc2" >"$out.rc"
  )
  read -r rc0 rc1 rc2 <"$out.rc"
  echo "torch: rc $rc0 $rc1 $rc2 (rank 2 is the victim)"
  grep -h "TORCHSHRINK\|Signal\|SIGSEGV\|Segmentation" "$out".[012] | sed 's/^/  /' | head -24
  res=PASS
  if [ "$rc2" != 137 ] || [ "$rc0" != 0 ] || [ "$rc1" != 0 ] || grep -q "TORCHSHRINK.*WRONG" "$out".[01]; then
    res=FAIL
    fail=1
  fi
  how=$(grep -h -o "TORCHSHRINK rank 0 \(shrank.*\|shrink_group .*\|continued .*\)" "$out.0" | tr '\n' ' ' | cut -c1-240)
  echo "RESULT torch-shrink $res ($how)"
  echo "| torch-shrink | 3 | $res | $how |" >>"$SUMMARY"
else
  echo "RESULT torch-shrink SKIPPED (no torch, or SKIP_TORCH)"
fi
cat "$SUMMARY"
echo "RESILIENCE $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
