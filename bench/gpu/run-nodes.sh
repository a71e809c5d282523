#!/usr/bin/env bash
# run-nodes.sh — issue 24 on one H200: simulated nodes on one GPU (every
# rank a process under MPS; ranks of different nodes have different
# MSCCLPP_HOSTID and talk only through the port-channel proxy over UCX),
# nccl-tests on Theseus beside NCCL's own socket transport on the same
# loopback. ONE device call (nvidia-h200), carrying .device and
# third_party, about 5 minutes; results packed after every run into
# $OUT/nodes-results.tgz.
#
#   (here)   bash bench/gpu/prepare.sh      # .device: prefix, proxy.test, COMMIT
#   (device) bash bench/gpu/run-nodes.sh [STEP...]
#
# Steps (default: info build nccl theseus):
#   info     GPU, cores, UCX (ucx_info -v, its transports: cuda_copy present
#            means a UCX built with CUDA, so device memory goes direct)
#   build    nccl-tests twice in the background, as run-multi.sh does
#            (.device/build_nccl_tests.sh -> build/nccl-tests against
#            Theseus's nccl.h; .device/build_nccl_baseline.sh ->
#            build/nccl-tests-nccl against the machine's NCCL); binaries
#            carried in .device/nccl-bin/{nccl-tests,nccl-tests-nccl} are
#            used instead
#   theseus  for each layout in LAYOUTS (default "2x1 2x2": nodes x ranks
#            per node) and each transport in TRANSPORTS, each test in TESTS:
#            nccl-tests on Theseus, -g 1 -c 1 (#wrong checked)
#   nccl     NCCL 2.28 with NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo and a
#            different NCCL_HOSTID per rank (NCCL refuses two ranks of one
#            host on one GPU), for the same rank counts and TESTS
#
# TRANSPORTS (Theseus; default "tcp-l4 tcp tcpcuda-l4 default"):
#   tcp      UCX_TLS=tcp: device memory staged through pinned host memory
#            (the INIT log says "staged")
#   tcpcuda  UCX_TLS=tcp,cuda_copy: direct when this UCX has CUDA support
#            (the INIT log says "direct"); staged otherwise
#   default  UCX's default transports, shared memory allowed
#            (UCX_MM_ERROR_HANDLING=y): LABELLED, not the loopback-TCP figure
#   a suffix -lN runs N lanes (THESEUS_PROXY_LANES=N: N proxies, each its
#   own UCX worker, progress thread and TCP connection per pair of ranks,
#   the schedule's channels spread over them); further suffixes, for A/B
#   runs of the proxy's tuning (docs/transport.md, "Figures"):
#     -base     as before that tuning: UCX's TCP segments (8k/64k), a 2 MB
#               staging buffer, one synchronous staging copy per put
#     -seg8k    UCX's TCP segments only (UCX_TCP_TX/RX_SEG_SIZE=8k/64k)
#     -nobatch  one synchronous staging copy per put only
#               (THESEUS_PROXY_STAGE_BATCH=0)
#     -stage2m  a 2 MB staging buffer only (THESEUS_PROXY_STAGE_BYTES=2MB)
#     -spin     the idle proxy polls for 10 s before it sleeps
#               (THESEUS_PROXY_SPIN=10000000: is a sleeping proxy the cost?)
#     -llfence  every LL launch fenced, self-fenced schedules' too
#               (THESEUS_LL_FENCE=1: what the fence round trip costs)
#   for example tcp-l4-base.
#
# Knobs (passed through to every Theseus run): THESEUS_SLICE_BYTES (the
# pipeline slice: the size of one put; default 1 MiB), THESEUS_PROXY_SPIN,
# UCX_TCP_TX_SEG_SIZE / UCX_TCP_RX_SEG_SIZE / UCX_TCP_SNDBUF /
# UCX_TCP_RCVBUF (UCX's TCP segments and socket buffers), and EXTRA_ENV
# ("K=V K=V"). NT_SIZES (default -b 8 -e 128M -f 4), NT_ITERS (default -n
# 10 -w 3), DEADLINE (seconds, default 290), RESULTS (the archive's name
# under $OUT, default nodes-results).
#
# Success: every Theseus row rc=0 and #wrong=0 (sendrecv and alltoall,
# grouped ncclSend/ncclRecv, run on the point-to-point engine, whose kernel
# posts to the proxy across nodes: docs/p2p.md, "Across nodes";
# bench/gpu/p2p-nodes.sh is their short check); summary.md gives busbw at >= 32 MiB and the 8 B time of every run, and the
# goal lines (busbw >= 1.5x NCCL's socket transport at >= 32 MiB; 8 B time
# <= NCCL's; NCCL 2.28 on 2026-12-01: all_reduce 3.05 GB/s at 128 MiB and
# 41 us at 8 B, all_gather 3.15 GB/s).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/nodes-results.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL" "$R/runs" "$R/logs"
RESULTS=${RESULTS:-nodes-results} # the archive's name (two runs in one call: different names)
pack() { tar czf "$FINAL/$RESULTS.tgz.tmp" -C "$R" . && mv "$FINAL/$RESULTS.tgz.tmp" "$FINAL/$RESULTS.tgz"; }
trap 'stop_mps; pack' EXIT
export NCCL_NVLS_ENABLE=0 GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
STEPS=${*:-info build nccl theseus}
LAYOUTS=${LAYOUTS:-2x1 2x2}
TRANSPORTS=${TRANSPORTS:-tcp-l4 tcp tcpcuda-l4 default}
TESTS=${TESTS:-all_reduce all_gather reduce_scatter alltoall sendrecv}
NT_SIZES=${NT_SIZES:--b 8 -e 128M -f 4}
NT_ITERS=${NT_ITERS:--n 10 -w 3}
T0=$(date +%s)
DEADLINE=${DEADLINE:-290}
log() { echo "== +$(($(date +%s) - T0))s $*" | tee -a "$R/steps.txt"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
bound() { local l; l=$(left); [ "$1" -gt "$l" ] && echo "$l" || echo "$1"; }
want() { case " ${STEPS} " in *" $1 "*) return 0 ;; esac; return 1; }

# MPS as the other GPU scripts start it (ncclabi/gpu/common.sh; it sets -e,
# which this script does not want: each run's failure is a row).
source "$ROOT/ncclabi/gpu/common.sh"
set +e

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?')"
  echo "steps: $STEPS; layouts: $LAYOUTS; transports: $TRANSPORTS; tests: $TESTS"
  echo "sizes: $NT_SIZES $NT_ITERS"
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader 2>&1
  echo "cores: $(nproc)"
  for k in THESEUS_SLICE_BYTES THESEUS_PROXY_SPIN THESEUS_PROXY_STAGE_BYTES THESEUS_PROXY_STAGE_BATCH UCX_TCP_TX_SEG_SIZE UCX_TCP_RX_SEG_SIZE UCX_TCP_SNDBUF UCX_TCP_RCVBUF EXTRA_ENV; do
    [ -n "${!k:-}" ] && echo "knob $k=${!k}"
  done
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"

if want info; then
  {
    ldconfig -p | grep -E "libucp\.so|libucs\.so|libnccl\.so" || echo "libucp not in the loader cache"
    command -v ucx_info >/dev/null && { ucx_info -v; ucx_info -d | grep -E "Transport|Device|memory types" | sort | uniq -c; }
  } >"$R/info.txt" 2>&1
  log "info: $(grep -c cuda_copy "$R/info.txt") cuda_copy lines in ucx_info -d (0: UCX without CUDA, the staged path)"
  pack
fi

NT_TH=$ROOT/build/nccl-tests
NT_NC=$ROOT/build/nccl-tests-nccl
if [ -d "$D/nccl-bin" ]; then
  NT_TH=$D/nccl-bin/nccl-tests NT_NC=$D/nccl-bin/nccl-tests-nccl
  log "nccl-tests: carried binaries in $D/nccl-bin"
elif want build; then
  (cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
    THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/build-theseus.txt" 2>&1 &
  bpid1=$!
  bash "$D/build_nccl_baseline.sh" >"$R/build-nccl.txt" 2>&1 &
  bpid2=$!
  log "nccl-tests builds started"
  wait "$bpid1"; echo "theseus build rc=$?" >>"$R/steps.txt"
  wait "$bpid2"; echo "nccl build rc=$?" >>"$R/steps.txt"
  log "nccl-tests builds done"
  pack
fi
NCCL_LIBDIR=$(dirname "$(readlink -f "$NT_NC/nccl-home/lib/libnccl.so.2" 2>/dev/null || ldconfig -p | awk '/libnccl\.so\.2 /{print $NF; exit}')")
start_mps

# launch N ENVFN BIN ARGS...: N processes of a minimpi program, rank r with
# the environment "$ENVFN r" prints (one K=V per line) added; rank 0's
# output to stdout, every rank's when one fails.
launch() {
  local n=$1 envfn=$2 dir r st=0
  shift 2
  dir=$(mktemp -d /tmp/minimpi.XXXXXX)
  local pids=()
  for ((r = 0; r < n; r++)); do
    mapfile -t extra < <("$envfn" "$r")
    env "${extra[@]}" MINIMPI_RANK=$r MINIMPI_SIZE=$n MINIMPI_DIR=$dir NCCL_TESTS_DEVICE=0 "$@" >"$dir/out.$r" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do wait "${pids[$r]}" || st=1; done
  cat "$dir/out.0"
  if [ "$st" != 0 ]; then for ((r = 1; r < n; r++)); do echo "---- rank $r ----"; cat "$dir/out.$r"; done; fi
  rm -rf "$dir"
  return $st
}

SUMMARY=$R/summary.md
{
  echo "# Simulated nodes on one GPU: nccl-tests on Theseus over UCX beside NCCL's socket transport"
  echo
  echo "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1); ranks are processes under MPS; commit $(cut -c1-7 "$D/COMMIT" 2>/dev/null); $NT_SIZES $NT_ITERS -g 1 -c 1"
  echo
  echo "| library | layout | transport | test | exit | #wrong | busbw GB/s at >= 32 MiB (max) | 8 B time us | path (INIT) |"
  echo "|---|---|---|---|---|---|---|---|---|"
} >"$SUMMARY"

# row NAME: the numbers of one run's table: max #wrong, max busbw over the
# rows of >= 32 MiB (out of place and in place), the 8 B row's out-of-place
# time.
row() {
  awk '/^ *[0-9]+ +[0-9]+ +[a-z0-9]+ /{
      for (i = 9; i <= NF; i += 4) if ($i ~ /^[0-9]+$/ && $i+0 > w) w = $i+0
      if ($1+0 >= 33554432) { for (i = 8; i <= NF; i += 4) if ($i+0 > bw) bw = $i+0 }
      if ($1+0 == 8) t8 = $6
      rows++
    } END { printf "%d %s %s %d", w+0, (bw ? bw : "-"), (t8 ? t8 : "-"), rows+0 }' "$1"
}

th_env() { # th_env R: Theseus rank R's environment (layout and transport from the caller)
  local r=$1
  echo "LD_LIBRARY_PATH=$NT_TH/minimpi/lib:$D/prefix/lib"
  echo "THESEUS_BACKEND=cuda"
  echo "THESEUS_ALLOW_SHARED_DEVICE=1"
  echo "THESEUS_TIMEOUT=60000"
  echo "THESEUS_DEBUG=INFO"
  echo "THESEUS_DEBUG_SUBSYS=INIT,NET"
  echo "THESEUS_DEBUG_FILE=$R/logs/$NAME.%p"
  echo "MSCCLPP_HOSTID=node$((r / PER))"
  echo "MSCCLPP_SOCKET_IFNAME=lo"
  local part
  for part in $(echo "$TP" | tr '-' ' '); do
    case $part in
    tcp) echo "UCX_TLS=tcp" ;;
    tcpcuda) echo "UCX_TLS=tcp,cuda_copy" ;;
    default) echo "UCX_MM_ERROR_HANDLING=y" ;;
    l[0-9]*) echo "THESEUS_PROXY_LANES=${part#l}" ;;
    base) # the proxy as before issue 24's tuning (A/B): UCX's TCP segments, two staging halves, one synchronous copy per put
      echo "UCX_TCP_TX_SEG_SIZE=8k"; echo "UCX_TCP_RX_SEG_SIZE=64k"
      echo "THESEUS_PROXY_STAGE_BYTES=2MB"; echo "THESEUS_PROXY_STAGE_BATCH=0" ;;
    seg8k) echo "UCX_TCP_TX_SEG_SIZE=8k"; echo "UCX_TCP_RX_SEG_SIZE=64k" ;;
    nobatch) echo "THESEUS_PROXY_STAGE_BATCH=0" ;;
    stage2m) echo "THESEUS_PROXY_STAGE_BYTES=2MB" ;;
    spin) echo "THESEUS_PROXY_SPIN=10000000" ;;
    llfence) echo "THESEUS_LL_FENCE=1" ;;
    esac
  done
  for k in THESEUS_SLICE_BYTES THESEUS_PROXY_SPIN THESEUS_PROXY_STAGE_BYTES THESEUS_PROXY_STAGE_BATCH UCX_TCP_TX_SEG_SIZE UCX_TCP_RX_SEG_SIZE UCX_TCP_SNDBUF UCX_TCP_RCVBUF; do
    [ -n "${!k:-}" ] && echo "$k=${!k}"
  done
  for kv in ${EXTRA_ENV:-}; do echo "$kv"; done
}
nc_env() { # nc_env R: NCCL rank R's environment (every rank its own host)
  echo "LD_LIBRARY_PATH=$NT_NC/minimpi/lib:$NCCL_LIBDIR"
  echo "NCCL_NET=Socket"
  echo "NCCL_SOCKET_IFNAME=lo"
  echo "NCCL_HOSTID=host$1"
  echo "NCCL_IB_DISABLE=1"
  echo "NCCL_DEBUG=VERSION"
}

run1() { # run1 LIB LAYOUT TRANSPORT TEST
  local lib=$1 layout=$2 tp=$3 t=$4 n b rc bin fn
  NODES=${layout%x*} PER=${layout#*x} TP=$tp
  n=$((NODES * PER))
  NAME=$lib-$layout-$tp-$t
  b=$(bound 90)
  if [ "$b" -lt 15 ]; then log "$NAME skipped: the call's time is spent"; return; fi
  if [ "$lib" = theseus ]; then bin=$NT_TH/${t}_perf fn=th_env; else bin=$NT_NC/${t}_perf fn=nc_env; fi
  if [ ! -x "$bin" ]; then log "$NAME skipped: no $bin"; return; fi
  log "$NAME ($n ranks, bound ${b}s)"
  launch "$n" "$fn" timeout "$b" "$bin" $NT_SIZES $NT_ITERS -g 1 -c 1 >"$R/runs/$NAME.txt" 2>&1
  rc=$?
  set -- $(row "$R/runs/$NAME.txt")
  local path="-"
  if [ "$lib" = theseus ]; then
    path=$(cat "$R/logs/$NAME".* 2>/dev/null | grep -m1 -o "port channels across nodes: [^)]*)\?" | sed 's/port channels across nodes: //')
    local net
    net=$(cat "$R/logs/$NAME".* 2>/dev/null | grep -m1 -o "NET/UCX [a-z_0-9]*/[a-z0-9]*" || true)
    path="${path:-no INIT line} ${net}"
  fi
  echo "| $lib | $layout | $tp | $t | $rc | $1 | $2 | $3 | $path |" >>"$SUMMARY"
  echo "   rc=$rc wrong=$1 busbw>=32M=$2 t8=$3 rows=$4 $path" | tee -a "$R/steps.txt"
  pack
}

if want nccl; then
  for layout in $LAYOUTS; do
    # NCCL: as many ranks, each its own host (sockets between all of them).
    n=$((${layout%x*} * ${layout#*x}))
    for t in $TESTS; do run1 nccl "${n}x1" socket "$t"; done
  done
fi
if want theseus; then
  for tp in $TRANSPORTS; do
    for layout in $LAYOUTS; do
      for t in $TESTS; do run1 theseus "$layout" "$tp" "$t"; done
    done
  done
fi

{
  echo
  echo "Goals (issue 24): Theseus busbw >= 1.5x NCCL's socket transport at >= 32 MiB, and its 8 B time <= NCCL's, per test and rank count:"
  echo
  awk -F'|' '/^\| (theseus|nccl) /{
      lib=$2; gsub(/ /, "", lib); lay=$3; gsub(/ /, "", lay); tp=$4; gsub(/ /, "", tp); t=$5; gsub(/ /, "", t); bw=$8+0; t8=$9+0
      split(lay, a, "x"); n=a[1]*a[2]
      if (lib == "nccl") { nbw[n" "t]=bw; nt8[n" "t]=t8 } else if (tp !~ /^default/) { key=n" "t" "tp; tbw[key]=bw; tt8[key]=t8; keys[key]=1 }
    } END {
      for (k in keys) { split(k, p, " "); nk=p[1]" "p[2]
        if (!(nk in nbw) || nbw[nk] == 0) continue
        printf "- %d ranks %s over %s: busbw %.2f vs NCCL %.2f (x%.2f, goal 1.5: %s); 8 B %s us vs %s us (%s)\n", p[1], p[2], p[3], tbw[k], nbw[nk], tbw[k]/nbw[nk], (tbw[k] >= 1.5*nbw[nk] ? "met" : "NOT met"), tt8[k], nt8[nk], (tt8[k] > 0 && tt8[k] <= nt8[nk] ? "met" : "NOT met")
      } }' "$SUMMARY"
} >>"$SUMMARY"
cat "$SUMMARY"
log "done"
