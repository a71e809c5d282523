#!/usr/bin/env bash
# run-multi.sh — issue 8: Theseus beside NCCL on the GPUs of one host, one
# process per GPU (no MPS), in ONE device call, each step bounded, results
# packed after every step into $OUT/multi-results.tgz.
#
#   (device, nvidia-h200-x2) bash bench/gpu/run-multi.sh [STEP...]
#
# Steps (default: info build bench nccl-tests):
#   info        nvidia-smi, the GPUs' links (topo -m, nvlink -s), peer access
#   build       NVIDIA's nccl-tests, built on the machine twice, in the
#               background: against Theseus's nccl.h (.device/build_nccl_tests.sh
#               → build/nccl-tests) and against the machine's NCCL
#               (.device/build_nccl_baseline.sh → build/nccl-tests-nccl), in
#               about 50-90 s beside the bench step. Binaries carried in
#               .device/nccl-bin/{nccl-tests,nccl-tests-nccl} are used instead.
#   bench       theseus-bench --backend cuda, one process per GPU, every
#               collective, TB_SIZES (default -b 8 -e 1G), then its hot swap
#   nccl-tests  for each test in TESTS, library in LIBS and graph mode in
#               GRAPHS: nccl-tests with NT_SIZES NT_ITERS -g 1 -c 1 [-G 1]
#   profile     Nsight Compute (application replay) on one Theseus and one
#               NCCL all_reduce kernel: at 8 B its warp stalls, at
#               PROFILE_BYTES (default 1 GiB) throughput and occupancy
#
# NVLink multicast stays off (NCCL_NVLS_ENABLE=0 and friends, KINDS.md).
# nccl-tests' source is third_party/nccl-tests (git-ignored); the build
# scripts live in .device/ (never committed).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/multi-results.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL" "$R/nt/logs"
pack() { tar czf "$FINAL/multi-results.tgz.tmp" -C "$R" . && mv "$FINAL/multi-results.tgz.tmp" "$FINAL/multi-results.tgz"; }
trap pack EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
NGPU=${NGPU:-$(nvidia-smi -L | wc -l)}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$(seq -s, 0 $((NGPU - 1)))}
CTX=${THESEUS_SELECTION_CONTEXT:-$D/context}
[ -d "$CTX" ] || CTX=$ROOT/examples/contexts/default
TB_SIZES=${TB_SIZES:--b 8 -e 1G}
NT_SIZES=${NT_SIZES:--b 8 -e 8G -f 2}
NT_ITERS=${NT_ITERS:--n 20 -w 5}
TESTS=${TESTS:-all_reduce all_gather reduce_scatter broadcast alltoall}
LIBS=${LIBS:-nccl theseus}
GRAPHS=${GRAPHS:-0 1}
PROFILE_BYTES=${PROFILE_BYTES:-1G}
T0=$(date +%s)
DEADLINE=${DEADLINE:-570}
log() { echo "== +$(($(date +%s) - T0))s $*" | tee -a "$R/steps.txt"; }
left() { echo $((DEADLINE - ($(date +%s) - T0))); }
bound() { local l; l=$(left); [ "$1" -gt "$l" ] && echo "$l" || echo "$1"; }
want() { case " ${STEPS} " in *" $1 "*) return 0 ;; esac; return 1; }
STEPS=${*:-info build bench nccl-tests}

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?')"
  echo "steps: $STEPS; GPUs: $NGPU; context: $CTX"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,pci.bus_id --format=csv,noheader
  nvcc --version | tail -1
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"

if want info; then
  {
    nvidia-smi
    nvidia-smi topo -m
    nvidia-smi nvlink -s -i 0 | head -24
    python3 -c 'import torch; n = torch.cuda.device_count(); print("torch devices", n, "peer access", [[torch.cuda.can_device_access_peer(a, b) for b in range(n)] for a in range(n)], "nccl", torch.cuda.nccl.version())'
    ldconfig -p | grep -i nccl
    ls /usr/include/nccl*.h 2>/dev/null
  } >"$R/info.txt" 2>&1
  log "info"; grep -E "GPU[0-9]|NV[0-9]+|torch devices|Link 0" "$R/info.txt" | head -12; pack
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
fi

if want bench; then
  b=$(bound 300)
  log "theseus-bench, $NGPU processes, one per GPU ($TB_SIZES, bound ${b}s)"
  rm -f /tmp/tb.id
  pids=()
  for ((r = 0; r < NGPU; r++)); do
    RANK=$r WORLD_SIZE=$NGPU LOCAL_RANK=$r timeout "$b" "$D/theseus-bench" --backend cuda --id-file /tmp/tb.id \
      $TB_SIZES --progress never >"$R/bench.$r.txt" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < NGPU; r++)); do wait "${pids[$r]}"; echo "   theseus-bench rank $r rc=$?" | tee -a "$R/steps.txt"; done
  tail -20 "$R/bench.0.txt"; pack
fi

if [ -n "${bpid1:-}" ]; then
  wait "$bpid1"; echo "theseus build rc=$?" >>"$R/steps.txt"
  wait "$bpid2"; echo "nccl build rc=$?" >>"$R/steps.txt"
  log "nccl-tests builds done"; tail -3 "$R/build-theseus.txt" "$R/build-nccl.txt"
  # PACK_BIN=1: the binaries too (about 36 MB: over what a device call
  # returns; write them under $OUT yourself if the tool allows it).
  if [ "${PACK_BIN:-0}" = 1 ]; then
    tar czf "$R/nccl-bin.tgz" -C "$ROOT/build" $(cd "$ROOT/build" && ls -d nccl-tests/*_perf nccl-tests/minimpi/lib nccl-tests-nccl/*_perf nccl-tests-nccl/minimpi/lib 2>/dev/null)
  fi
  pack
fi
NCCL_LIBDIR=$(dirname "$(readlink -f "$NT_NC/nccl-home/lib/libnccl.so.2" 2>/dev/null || ldconfig -p | awk '/libnccl\.so\.2 /{print $NF; exit}')")

SUMMARY=$R/nt/summary.md
nt() { # nt LIB GRAPH TEST
  local lib=$1 g=$2 t=$3 name bin gflag="" b rc
  name=$lib-g$g-$t
  [ "$g" = 1 ] && gflag="-G 1"
  b=$(bound 150)
  if [ "$b" -lt 15 ]; then log "$name skipped: the call's time is spent"; return; fi
  if [ "$lib" = theseus ]; then
    bin=$NT_TH/${t}_perf
    envs=(LD_LIBRARY_PATH="$NT_TH/minimpi/lib:$D/prefix/lib" THESEUS_BACKEND=cuda THESEUS_SELECTION_CONTEXT="$CTX"
      THESEUS_DEBUG=INFO THESEUS_DEBUG_SUBSYS=INIT THESEUS_DEBUG_FILE="$R/nt/logs/$name.%p" THESEUS_TIMEOUT=60000)
  else
    bin=$NT_NC/${t}_perf
    envs=(LD_LIBRARY_PATH="$NT_NC/minimpi/lib:$NCCL_LIBDIR" NCCL_DEBUG=VERSION)
  fi
  log "$name (bound ${b}s)"
  env "${envs[@]}" timeout "$b" "$ROOT/ncclabi/gpu/minimpirun.sh" "$NGPU" "$bin" $NT_SIZES $NT_ITERS -g 1 -c 1 $gflag >"$R/nt/$name.txt" 2>&1
  rc=$?
  local wrong
  wrong=$(awk '/^ *[0-9]+ +[0-9]+ +[a-z0-9]+ /{ for (i = 9; i <= NF; i += 4) if ($i ~ /^[0-9]+$/ && $i+0 > m) m = $i+0; rows++ } END { printf "%d %d", m+0, rows+0 }' "$R/nt/$name.txt")
  set -- $wrong
  local lastrow avg libline
  lastrow=$(grep -E '^ *[0-9]+ +[0-9]+ ' "$R/nt/$name.txt" | tail -1 | tr -s ' ')
  avg=$(grep -m1 "Avg bus bandwidth" "$R/nt/$name.txt" | awk '{print $NF}')
  libline=$(grep -h -m1 -o "nccl-library=[0-9]*" "$R/nt/$name.txt" || true)
  echo "| $lib | $g | $t | $rc | $1 | $2 | $avg | $libline | $lastrow |" >>"$SUMMARY"
  echo "   rc=$rc wrong=$1 rows=$2 avg=$avg $libline" | tee -a "$R/steps.txt"
  pack
}
if want nccl-tests; then
  {
    echo "# nccl-tests, Theseus beside NCCL ($(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(cut -c1-7 "$D/COMMIT" 2>/dev/null))"
    echo
    echo "$NGPU GPUs, one process per GPU (minimpi), arguments: $NT_SIZES $NT_ITERS -g 1 -c 1 [-G 1]"
    echo
    echo "| library | graph | test | exit | #wrong (max) | rows | avg busbw | nccl-library | largest row |"
    echo "|---|---|---|---|---|---|---|---|---|"
  } >"$SUMMARY"
  for g in $GRAPHS; do
    for t in $TESTS; do
      for lib in $LIBS; do nt "$lib" "$g" "$t"; done
    done
  done
  cat "$SUMMARY"
fi

if want profile; then
  # Nsight Compute with application replay (a kernel that waits for its
  # peer cannot be replayed alone): one allreduce kernel per library, at
  # 8 B (warp stalls: "no instruction" = instruction fetch, "long
  # scoreboard" = dependent loads) and at PROFILE_BYTES (throughput).
  for spec in "small 8 --section WarpStateStats --section SourceCounters --section LaunchStats" \
    "large $PROFILE_BYTES --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy"; do
    set -- $spec
    what=$1 bytes=$2; shift 2
    for lib in theseus nccl; do
      b=$(bound 120)
      [ "$b" -lt 20 ] && break
      log "profile $lib all_reduce $bytes (bound ${b}s)"
      if [ $lib = theseus ]; then
        bin=$NT_TH/all_reduce_perf
        envs=(LD_LIBRARY_PATH="$NT_TH/minimpi/lib:$D/prefix/lib" THESEUS_BACKEND=cuda THESEUS_SELECTION_CONTEXT="$CTX")
      else
        bin=$NT_NC/all_reduce_perf
        envs=(LD_LIBRARY_PATH="$NT_NC/minimpi/lib:$NCCL_LIBDIR")
      fi
      env "${envs[@]}" MINIMPI_ALL_OUTPUT=1 timeout "$b" "$ROOT/ncclabi/gpu/minimpirun.sh" "$NGPU" \
        ncu --target-processes all --replay-mode application --launch-skip 20 --launch-count 1 "$@" \
        "$bin" -b "$bytes" -e "$bytes" -n 30 -w 5 -g 1 -c 0 >"$R/profile-$what-$lib.txt" 2>&1
      echo "   rc=$?" | tee -a "$R/steps.txt"; pack
    done
  done
fi
log "done"
