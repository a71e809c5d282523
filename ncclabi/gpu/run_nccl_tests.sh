#!/usr/bin/env bash
# run_nccl_tests.sh — nccl-tests on Theseus, one process per rank on ONE
# GPU under MPS, through LD_LIBRARY_PATH and through LD_AUDIT, 2 and 4
# ranks: all_reduce, all_gather, reduce_scatter, broadcast, reduce and
# alltoall (nccl-tests built against a 2.25 header issues alltoall, like
# sendrecv, gather, scatter, hypercube and alltoallv, as grouped
# ncclSend/ncclRecv, which Theseus's point-to-point engine runs: TESTS picks
# them, ncclabi/gpu/run_p2p.sh does). Build nccl-tests into build/nccl-tests
# first (docs/ncclabi.md).
#
#   ncclabi/gpu/run_nccl_tests.sh            # sizes 8 B .. 64 MiB
#   SIZES="-b 8 -e 1M -f 4" ITERS="-n 5 -w 2" NRANKS="2" MODES="audit" ncclabi/gpu/run_nccl_tests.sh
#
# Results: $RESULTS/nccl-tests/<mode>-n<N>-<test>.txt (rank 0's table),
# .../logs/<...>.<pid> (each rank's Theseus log), and summary.md with
# #wrong per run and the Theseus log evidence (library loaded, calls
# served by a Theseus schedule). Exits non-zero if any run failed or had
# #wrong != 0.
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
BUILD=${NCCL_TESTS_BUILD:-$ROOT/build/nccl-tests}
# nccl-tests built against minimpi (build_nccl_tests.sh without MPI_HOME)
# link libmpi.so by name: put minimpi's first, or the loader finds the
# system's OpenMPI (whose MPI_COMM_WORLD differs) and every rank aborts.
if [ -d "$BUILD/minimpi/lib" ]; then
  export LD_LIBRARY_PATH="$BUILD/minimpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
SIZES=${SIZES:--b 8 -e 64M -f 4}
ITERS=${ITERS:--n 20 -w 5}
NRANKS=${NRANKS:-2 4}
MODES=${MODES:-ldpath audit}
TESTS=${TESTS:-all_reduce all_gather reduce_scatter broadcast reduce alltoall}
OUTD=$RESULTS/nccl-tests
mkdir -p "$OUTD/logs"
SUMMARY=$OUTD/summary.md
{
  echo "# nccl-tests on Theseus ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(cut -c1-7 "${THESEUS_PREFIX:-/nonexistent}/../COMMIT" 2>/dev/null || git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); one GPU, ranks are processes under MPS."
  echo "Arguments: $SIZES $ITERS -g 1 -c 1; THESEUS_SELECTION_CONTEXT=$THESEUS_SELECTION_CONTEXT"
  echo
  echo "| mode | ranks | test | exit | #wrong (max over rows) | rows | served natively (a schedule or the point-to-point engine) | lib loaded |"
  echo "|---|---|---|---|---|---|---|---|"
} >"$SUMMARY"
start_mps
trap stop_mps EXIT
fail=0
for mode in $MODES; do
  for n in $NRANKS; do
    for t in $TESTS; do
      name=$mode-n$n-$t
      bin=$BUILD/${t}_perf
      logs=$OUTD/logs/$name
      rm -f "$logs".*
      envs=(THESEUS_DEBUG_FILE="$logs.%p" NCCL_TESTS_DEVICE=0)
      if [ "$mode" = audit ]; then
        envs+=(LD_AUDIT="$PREFIX/lib/libtheseus_audit_nccl.so")
      else
        envs+=(LD_LIBRARY_PATH="$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
      fi
      echo "== $name"
      set +e
      env "${envs[@]}" timeout 540 "$ROOT/ncclabi/gpu/minimpirun.sh" "$n" "$bin" $SIZES $ITERS -g 1 -c 1 >"$OUTD/$name.txt" 2>&1
      rc=$?
      set -e
      # #wrong: columns 9 and 13 of the data rows (out of place, in place).
      wrong=$(awk '/^ *[0-9]+ +[0-9]+ +[a-z0-9]+ /{ for (i = 9; i <= NF; i += 4) if ($i ~ /^[0-9]+$/ && $i+0 > m) m = $i+0; rows++ } END { printf "%d %d", m+0, rows+0 }' "$OUTD/$name.txt")
      served=$(cat "$logs".* 2>/dev/null | grep -c "served by Theseus schedule\|served by point-to-point engine" || true)
      # Without INFO COLL lines (THESEUS_DEBUG_SUBSYS=INIT: repeats are then
      # launched from C, docs/ncclabi.md "Launches from C"), the destroy lines'
      # counts: "N (M launched from C)".
      if [ "$served" = 0 ]; then
        served=$(cat "$logs".* 2>/dev/null | grep -o "destroyed: [0-9]* requests served natively ([0-9]* of them launched from C)" |
          awk '{ n += $2; c += substr($6, 2) } END { if (n) printf "%d (%d from C)", n, c; else print 0 }')
      fi
      lib=$(cat "$logs".* 2>/dev/null | grep -m1 -o "Theseus NCCL [0-9.]* ABI (libtheseus_nccl.so)" || true)
      lib=${lib:-no Theseus log}
      set -- $wrong
      echo "| $mode | $n | $t | $rc | $1 | $2 | $served | $lib |" >>"$SUMMARY"
      tail -4 "$OUTD/$name.txt"
      if [ "$rc" != 0 ] || [ "$1" != 0 ] || [ "$2" = 0 ] || [ "$served" = 0 ]; then fail=1; fi
    done
  done
done
echo >>"$SUMMARY"
echo "Example log lines (first run):" >>"$SUMMARY"
first=$(ls "$OUTD"/logs/* 2>/dev/null | head -1 || true)
[ -n "$first" ] && grep -m6 "Init COMPLETE\|served by" "$first" | sed 's/^/    /' >>"$SUMMARY"
cat "$SUMMARY"
exit $fail
