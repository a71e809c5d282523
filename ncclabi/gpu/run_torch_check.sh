#!/usr/bin/env bash
# run_torch_check.sh — PyTorch (torch.distributed, backend "nccl") on
# Theseus through LD_AUDIT: torch_check.py with 2 and 4 processes on ONE
# GPU under MPS (THESEUS_ALLOW_SHARED_DEVICE=1).
#
#   ncclabi/gpu/run_torch_check.sh
#   NRANKS="4" ncclabi/gpu/run_torch_check.sh
#   NO_CONTEXT=1 NRANKS="2 3" ncclabi/gpu/run_torch_check.sh
#
# NO_CONTEXT=1 runs with no THESEUS_SELECTION_CONTEXT and a home directory
# without ~/.theseus: the library takes the context installed beside it
# (PREFIX/share/theseus/contexts/default) or its built-in default, and its
# INIT line "selection context DIR (installed|embedded default)" must say so
# (summary.md lists it). 3 ranks had no schedule in the old default context.
#
# Results: $RESULTS/torch/n<N>.txt (all ranks' output: the checks, the NCCL
# library each process loaded, Theseus's INFO log lines naming the schedule
# that served every collective) and summary.md. Exits non-zero on any
# failed check.
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
NRANKS=${NRANKS:-2 4}
if [ "${NO_CONTEXT:-0}" = 1 ]; then
  unset THESEUS_SELECTION_CONTEXT MSCCLPP_SELECTION_CONTEXT
  export PYTHONUSERBASE=${PYTHONUSERBASE:-$HOME/.local} # keep a user-site torch importable
  HOME=$(mktemp -d)
  export HOME XDG_CACHE_HOME=$HOME/.cache
  export THESEUS_DEBUG_SUBSYS=INIT,COLL
fi
PY=${PYTHON:-python3}
OUTD=$RESULTS/torch
mkdir -p "$OUTD"
SUMMARY=$OUTD/summary.md
{
  echo "# PyTorch on Theseus through LD_AUDIT ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo
  echo "torch $($PY -c 'import torch; print(torch.__version__)' 2>/dev/null); GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); one GPU, ranks are processes under MPS."
  echo
  echo "| ranks | exit | checks passed | checks failed | served by a Theseus schedule | NCCL loaded |"
  echo "|---|---|---|---|---|---|"
} >"$SUMMARY"
start_mps
trap stop_mps EXIT
fail=0
for n in $NRANKS; do
  out=$OUTD/n$n.txt
  echo "== torch_check, $n ranks"
  set +e
  LD_AUDIT="$PREFIX/lib/libtheseus_audit_nccl.so" timeout 540 \
    $PY -m torch.distributed.run --standalone --nproc-per-node="$n" "$ROOT/ncclabi/gpu/torch_check.py" >"$out" 2>&1
  rc=$?
  set -e
  # From every rank's closing line (ranks write to one file, so their "ok"
  # lines can run together; grep -o finds the closing lines anywhere).
  ok=$(grep -o "TORCHCHECK rank [0-9]* done: [0-9]* checks, [0-9]* failures" "$out" | awk '{s += $5 - $7} END {print s + 0}')
  bad=$(grep -c "FAIL\|ERROR" "$out" || true)
  served=$(grep -c "served by Theseus schedule" "$out" || true)
  if [ "$served" = 0 ]; then # no INFO COLL lines: the destroy lines' counts
    served=$(grep -o "destroyed: [0-9]* requests served natively ([0-9]* of them launched from C)" "$out" |
      awk '{ n += $2; c += substr($6, 2) } END { if (n) printf "%d (%d from C)", n, c; else print 0 }')
  fi
  lib=$(grep -m1 -o "NCCL loaded: .*" "$out" | cut -c15- || echo "?")
  echo "| $n | $rc | $ok | $bad | $served | $lib |" >>"$SUMMARY"
  if [ "${NO_CONTEXT:-0}" = 1 ]; then
    ctx=$(grep -m1 -o "selection context [^ ]* ([a-z ]*)" "$out" || true)
    echo "| | no context variable: $ctx | | | | |" >>"$SUMMARY"
    case "$ctx" in *"(installed)"|*"(embedded default)") ;; *) fail=1 ;; esac
  fi
  grep "TORCHCHECK.*\(FAIL\|ERROR\|done\|loaded\)" "$out" || true
  if [ "$rc" != 0 ] || [ "$bad" != 0 ] || [ "$ok" = 0 ] || [ "$served" = 0 ]; then fail=1; fi
done
{
  echo
  echo "Theseus log lines of the first run (rank 0):"
  grep -m12 "THESEUS VERSION\|THESEUS INFO audit\|Init COMPLETE\|served by" "$OUTD/n$(echo $NRANKS | cut -d' ' -f1).txt" | sed 's/^/    /'
} >>"$SUMMARY"
cat "$SUMMARY"
exit $fail
