#!/usr/bin/env bash
# run_p2p.sh — issue 22's GPU acceptance run of the point-to-point engine on
# ONE GPU (ranks are processes under MPS, or goroutines of one process for
# the Go tests), about 4 minutes, each step bounded:
#
#   1. the engine's GPU tests (.device/cuda.test -test.run TestP2P): patterns
#      at 2 and 4 ranks byte for byte, zero-copy used, a count mismatch named,
#      a captured group replayed;
#   2. nccl-tests sendrecv, gather, scatter, hypercube, alltoall and alltoallv
#      at 2 and 4 ranks, eager and with -G 1 (CUDA graphs), #wrong 0
#      (run_nccl_tests.sh, TESTS);
#   3. PyTorch (torch_p2p.py): send/recv, isend/irecv, batch_isend_irecv, a
#      two-stage pipeline, all_to_all_single with uneven splits, a captured
#      ring replayed; at 2 and 4 ranks, exact results;
#   4. the figures, in one run: cuMemcpyDtoD's bandwidth over 1 GiB alone and
#      in two processes at once (both ranks share the GPU's memory), 2-rank
#      sendrecv at 1 GiB (goal >= 0.9 of memcpy), 8 B sendrecv latency eager
#      (goal <= 10 us), and an MoE-like alltoallv of 8 ranks with 4 hot
#      experts against alltoall of the padded maximum (both times); with
#      the A/B of the same run (P2P_AB=1, the default): 1 GiB with helping
#      off (THESEUS_P2P_HELP=0), 8 B with 512 threads;
#   5. the engine's parameters: sendrecv 1 GiB and 8 B on the contexts of
#      P2P_CONTEXTS ("name=dir ...": the default plus a "gen": "p2p" entry,
#      which bench/gpu/prepare.sh makes under .device/p2p-contexts).
#
# Needs (bench/gpu/prepare.sh builds them here, in .device/): cuda.test, the
# library prefix (.device/prefix, or THESEUS_PREFIX), and nccl-tests built
# against it (build/nccl-tests, or NCCL_TESTS_BUILD; the lead's
# build_nccl_tests.sh); python3 with torch for step 3. A step whose needs are
# missing is skipped and says so.
#
#   (device) THESEUS_PREFIX=$PWD/.device/prefix bash ncclabi/gpu/run_p2p.sh
#   STEPS="2 4" bash ncclabi/gpu/run_p2p.sh        # some steps only
#
# Results under $RESULTS/p2p ($OUT/p2p with the device tool): one file per
# step, and summary.md (the table of runs, then the figures). Exits non-zero
# when a run fails or has #wrong != 0 (the figures' goals are reported, not
# enforced).
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
set +e # (common.sh sets -e: here every step's status is recorded, not fatal)
export THESEUS_DEBUG=${P2P_DEBUG:-WARN} # (INFO COLL lines per call would swamp the latency step)
D=$ROOT/.device
BUILD=${NCCL_TESTS_BUILD:-$ROOT/build/nccl-tests}
if [ -d "$BUILD/minimpi/lib" ]; then
  export LD_LIBRARY_PATH="$BUILD/minimpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
STEPS=${STEPS:-1 2 3 4 5}
OUTD=$RESULTS/p2p
mkdir -p "$OUTD"
SUMMARY=$OUTD/summary.md
T0=$(date +%s)
DEADLINE=${DEADLINE:-320} # seconds after the start; every step is cut to end by then
fail=0
{
  echo "# Point-to-point engine on one GPU ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(cat "$D/COMMIT" 2>/dev/null | cut -c1-10 || git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo '?'))"
  echo
  echo "GPU: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); ranks are processes under MPS."
  echo
  echo "| step | run | exit | result |"
  echo "|---|---|---|---|"
} >"$SUMMARY"
row() { echo "| $1 | $2 | $3 | $4 |" >>"$SUMMARY"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
# bounded SECONDS FILE CMD...: runs CMD with output in FILE, at most SECONDS
# and never past the deadline; returns CMD's status (124 on the bound).
bounded() {
  local s=$1 f=$2
  shift 2
  local l
  l=$(left)
  [ "$l" -lt "$s" ] && s=$l
  if [ "$s" -le 5 ]; then
    echo "skipped: the run's deadline has passed" >"$f"
    return 124
  fi
  timeout "$s" "$@" >"$f" 2>&1
}
want() { [[ " $STEPS " == *" $1 "* ]]; }
nccl_run() { # nccl_run NAME NRANKS TEST ARGS...: one nccl-tests run through LD_AUDIT (MATRIX: alltoallv's file)
  local name=$1 n=$2 t=$3
  shift 3
  local envs=(LD_AUDIT="$PREFIX/lib/libtheseus_audit_nccl.so" NCCL_TESTS_DEVICE=0)
  [ -n "${MATRIX:-}" ] && envs+=(NCCL_TESTS_ALLTOALLV_MATRIX_FILE="$MATRIX")
  bounded 60 "$OUTD/$name.txt" env "${envs[@]}" "$ROOT/ncclabi/gpu/minimpirun.sh" "$n" "$BUILD/${t}_perf" "$@" -g 1
}
wrong_of() { # the largest #wrong over the data rows, and the rows
  awk '/^ *[0-9]+ +[0-9]+ +[a-z0-9]+ /{ for (i = 9; i <= NF; i += 4) if ($i ~ /^[0-9]+$/ && $i+0 > m) m = $i+0; rows++ } END { printf "%d %d", m+0, rows+0 }' "$1"
}
col_of() { # col_of FILE N: column N (1-based) of the last data row
  awk -v c="$2" '/^ *[0-9]+ +[0-9]+ +[a-z0-9]+ /{ v = $c } END { print v }' "$1"
}
start_mps
trap stop_mps EXIT

# 1. The engine's GPU tests (goroutine ranks, no MPS needed).
if want 1; then
  if [ -x "$D/cuda.test" ]; then
    bounded 100 "$OUTD/gotests.txt" "$D/cuda.test" -test.run 'TestP2P' -test.v
    rc=$?
    res=$(grep -E "^(--- (PASS|FAIL|SKIP)|ok|FAIL)" "$OUTD/gotests.txt" | tr '\n' ' ')
    row 1 "cuda.test -test.run TestP2P" "$rc" "${res:-no output}"
    [ "$rc" = 0 ] || fail=1
  else
    row 1 "cuda.test" skipped "no $D/cuda.test (bench/gpu/prepare.sh)"
  fi
fi

# 2. nccl-tests, eager and CUDA graphs, 2 and 4 ranks.
if want 2; then
  if [ -x "$BUILD/sendrecv_perf" ]; then
    for n in 2 4; do
      for g in 0 1; do
        for t in sendrecv gather scatter hypercube alltoall alltoallv; do
          name=n$n-$t-$([ $g = 1 ] && echo graph || echo eager)
          extra=()
          [ $g = 1 ] && extra=(-G 1)
          size=(-b 8 -e 8M -f 32) # (8 MiB: zero-copy shared with the idle lanes, kernel "Helping")
          [ $t = alltoallv ] && size=(-b 64K -e 4M -f 64)
          nccl_run "$name" "$n" "$t" "${size[@]}" -n 5 -w 2 -c 1 "${extra[@]}"
          rc=$?
          set -- $(wrong_of "$OUTD/$name.txt")
          row 2 "$name" "$rc" "#wrong $1 over $2 rows"
          if [ "$rc" != 0 ] || [ "$1" != 0 ] || [ "$2" = 0 ]; then fail=1; fi
        done
      done
    done
  else
    row 2 "nccl-tests" skipped "no $BUILD/sendrecv_perf (build nccl-tests against $PREFIX)"
  fi
fi

# 3. PyTorch.
if want 3; then
  PY=${PYTHON:-python3}
  if $PY -c 'import torch' 2>/dev/null; then
    for n in 2 4; do
      bounded 120 "$OUTD/torch-n$n.txt" env LD_AUDIT="$PREFIX/lib/libtheseus_audit_nccl.so" \
        $PY -m torch.distributed.run --standalone --nproc-per-node="$n" "$ROOT/ncclabi/gpu/torch_p2p.py"
      rc=$?
      done_lines=$(grep -o "TORCHP2P rank [0-9]* done: [0-9]* checks, [0-9]* failures" "$OUTD/torch-n$n.txt" | wc -l)
      failed=$(grep -c "TORCHP2P rank [0-9]* FAIL\|TORCHP2P rank [0-9]* ERROR" "$OUTD/torch-n$n.txt" || true)
      checks=$(grep -o "done: [0-9]* checks" "$OUTD/torch-n$n.txt" | awk '{s += $2} END {print s + 0}')
      row 3 "torch_p2p.py, $n ranks" "$rc" "$checks checks, $failed failed, $done_lines of $n ranks done"
      if [ "$rc" != 0 ] || [ "$failed" != 0 ] || [ "$done_lines" != "$n" ]; then fail=1; fi
    done
  else
    row 3 "torch_p2p.py" skipped "no torch for $PY"
  fi
fi

# 4. The figures.
if want 4; then
  [ -x "$D/cuda.test" ] || [ -x "$BUILD/sendrecv_perf" ] || row 4 "figures" skipped "no cuda.test and no nccl-tests"
  memcpy=
  if [ -x "$D/cuda.test" ]; then
    # BenchmarkBandwidthMemcpy reports 2 x 1 GiB (read and write) per copy:
    # half is the copy's bytes per second, as nccl-tests counts sendrecv's.
    bounded 60 "$OUTD/memcpy.txt" "$D/cuda.test" -test.run xxx -test.bench 'BandwidthMemcpy$' -test.benchtime 20x
    memcpy=$(awk '/BenchmarkBandwidthMemcpy/ { for (i = 1; i < NF; i++) if ($(i+1) == "GB/s") print $i / 2 }' "$OUTD/memcpy.txt" | tail -1)
    for k in 0 1; do
      timeout 60 "$D/cuda.test" -test.run xxx -test.bench 'BandwidthMemcpy$' -test.benchtime 20x >"$OUTD/memcpy-both.$k.txt" 2>&1 &
    done
    wait
    both=$(cat "$OUTD"/memcpy-both.*.txt | awk '/BenchmarkBandwidthMemcpy/ { for (i = 1; i < NF; i++) if ($(i+1) == "GB/s") s += $i / 2 } END { if (s) print s }')
    row 4 "cuMemcpyDtoD 1 GiB" 0 "alone ${memcpy:-?} GB/s; two processes at once: ${both:-?} GB/s together"
  fi
  if [ -x "$BUILD/sendrecv_perf" ]; then
    nccl_run sendrecv-1G 2 sendrecv -b 1G -e 1G -n 20 -w 5 -c 1
    rc=$?
    bw=$(col_of "$OUTD/sendrecv-1G.txt" 7)
    ratio=$(awk -v b="$bw" -v m="$memcpy" 'BEGIN { if (b != "" && m > 0) printf "%.2f", b / m; else print "?" }')
    ratio2=$(awk -v b="$bw" -v m="${both:-}" 'BEGIN { if (b != "" && m > 0) printf "%.2f", 2 * b / m; else print "?" }')
    ratio3=$(awk -v b="$bw" -v m="$memcpy" 'BEGIN { if (b != "" && m > 0) printf "%.2f", 2 * b / m; else print "?" }')
    w1g=$(wrong_of "$OUTD/sendrecv-1G.txt" | cut -d' ' -f1)
    row 4 "sendrecv 2 ranks 1 GiB" "$rc" "algbw $bw GB/s = $ratio of memcpy alone (goal >= 0.9); both ranks together (they share the GPU's memory): $ratio3 of memcpy alone, $ratio2 of two concurrent memcpys' sum; #wrong $w1g"
    if [ "$rc" != 0 ] || [ "$w1g" != 0 ]; then fail=1; fi
    # The A/B of the same run (P2P_AB=0 leaves it out): helping off
    # (THESEUS_P2P_HELP=0). (The kernel's launch bound is 512 threads.)
    if [ "${P2P_AB:-1}" = 1 ]; then
      for ab in "nohelp THESEUS_P2P_HELP=0"; do
        set -- $ab
        tag=$1
        shift
        (
          export "$@"
          nccl_run "sendrecv-1G-$tag" 2 sendrecv -b 1G -e 1G -n 20 -w 5 -c 1
        )
        rc=$?
        bwab=$(col_of "$OUTD/sendrecv-1G-$tag.txt" 7)
        wab=$(wrong_of "$OUTD/sendrecv-1G-$tag.txt" | cut -d' ' -f1)
        row 4 "sendrecv 2 ranks 1 GiB, $*" "$rc" "algbw $bwab GB/s = $(awk -v b="$bwab" -v m="$memcpy" 'BEGIN { if (b != "" && m > 0) printf "%.2f", b / m; else print "?" }') of memcpy alone; #wrong $wab"
        if [ "$rc" != 0 ] || [ "$wab" != 0 ]; then fail=1; fi
      done
    fi
    nccl_run sendrecv-8B 2 sendrecv -b 8 -e 8 -n 2000 -w 200 -c 1
    rc=$?
    row 4 "sendrecv 2 ranks 8 B eager" "$rc" "time $(col_of "$OUTD/sendrecv-8B.txt" 6) us (goal <= 10 us; 256 threads by the size rule)"
    [ "$rc" = 0 ] || fail=1
    if [ "${P2P_AB:-1}" = 1 ]; then
      THESEUS_NTHREADS=512 nccl_run sendrecv-8B-512 2 sendrecv -b 8 -e 8 -n 2000 -w 200 -c 1
      row 4 "sendrecv 2 ranks 8 B eager, THESEUS_NTHREADS=512" "$?" "time $(col_of "$OUTD/sendrecv-8B-512.txt" 6) us"
    fi
    nccl_run sendrecv-8B-graph 2 sendrecv -b 8 -e 8 -n 2000 -w 200 -c 1 -G 100
    row 4 "sendrecv 2 ranks 8 B, CUDA graph of 100" "$?" "time $(col_of "$OUTD/sendrecv-8B-graph.txt" 6) us"
    # MoE: 8 ranks each sending 64 MiB, 90% of it to 4 hot experts (ranks 0-3)
    # (P2P_MOE=0 leaves it out).
  fi
  if [ -x "$BUILD/sendrecv_perf" ] && [ "${P2P_MOE:-1}" = 1 ]; then
    hot=$(((64 << 20) * 9 / 10 / 4 / 16 * 16)) cold=$(((64 << 20) / 10 / 4 / 16 * 16))
    mat=$OUTD/moe-matrix.txt
    for i in $(seq 0 7); do
      for j in $(seq 0 7); do if [ "$j" -lt 4 ]; then printf "%d " $hot; else printf "%d " $cold; fi; done
      echo
    done >"$mat"
    recvmax=$((8 * hot)) # a hot expert receives from every rank
    MATRIX=$mat
    nccl_run moe-alltoallv 8 alltoallv -b $recvmax -e $recvmax -n 10 -w 3 -c 1 -a 3
    rc=$?
    MATRIX=
    tv=$(col_of "$OUTD/moe-alltoallv.txt" 6)
    nccl_run moe-alltoall-padded 8 alltoall -b $recvmax -e $recvmax -n 10 -w 3 -c 1 -a 3
    rc2=$?
    tp=$(col_of "$OUTD/moe-alltoall-padded.txt" 6)
    row 4 "MoE 8 ranks, 4 hot experts" "$rc/$rc2" "alltoallv $tv us; alltoall of the padded maximum ($hot B per peer) $tp us"
    [ "$rc" = 0 ] && [ "$rc2" = 0 ] || fail=1
  fi
fi
# 5. The engine's parameters: sendrecv 1 GiB and 8 B on other selection contexts, each
#    the default plus a "gen": "p2p" entry (P2P_CONTEXTS="name=dir ...", made by
#    bench/gpu/prepare.sh under .device/p2p-contexts).
if want 5; then
  for nc in ${P2P_CONTEXTS:-}; do
    name=${nc%%=*} dir=${nc#*=}
    THESEUS_SELECTION_CONTEXT=$dir nccl_run "sweep-$name-1G" 2 sendrecv -b 1G -e 1G -n 20 -w 5 -c 1
    rc=$?
    bw=$(col_of "$OUTD/sweep-$name-1G.txt" 7)
    THESEUS_SELECTION_CONTEXT=$dir nccl_run "sweep-$name-8B" 2 sendrecv -b 8 -e 8 -n 2000 -w 200 -c 1
    rc2=$?
    row 5 "sendrecv 2 ranks, $name ($(tr -d '\n' <"$dir/p2p-entry.json" 2>/dev/null))" "$rc/$rc2" "1 GiB algbw $bw GB/s; 8 B $(col_of "$OUTD/sweep-$name-8B.txt" 6) us"
  done
fi
echo >>"$SUMMARY"
echo "Total: $(($(date +%s) - T0)) s; exit $fail." >>"$SUMMARY"
cat "$SUMMARY"
exit $fail
