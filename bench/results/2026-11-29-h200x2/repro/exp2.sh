#!/usr/bin/env bash
# exp2.sh — call 3: hot-swap failure, -G after the capture fix, latency variants.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/exp2.XXXXXX)
FINAL=${OUT:-$ROOT/build}; mkdir -p "$FINAL" "$R/nt" "$R/logs"
pack() { tar czf "$FINAL/exp2.tgz.tmp" -C "$R" . && mv "$FINAL/exp2.tgz.tmp" "$FINAL/exp2.tgz"; }
trap pack EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 GODEBUG=asyncpreemptoff=1
export CUDA_VISIBLE_DEVICES=0,1
T0=$(date +%s)
log() { echo "== +$(($(date +%s) - T0))s $*" | tee -a "$R/steps.txt"; }
cat "$D/COMMIT" >"$R/commit.txt"
(cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
  THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/build-theseus.txt" 2>&1 &
b1=$!
tb() { # tb NAME CTX ARGS...
  local name=$1 ctx=$2; shift 2
  rm -f /tmp/tb.id
  local pids=()
  for r in 0 1; do
    THESEUS_DEBUG=INFO THESEUS_DEBUG_SUBSYS=ALL THESEUS_DEBUG_FILE=$R/logs/$name.%p THESEUS_SELECTION_CONTEXT=$ctx RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout 60 "$D/theseus-bench" --backend cuda \
      --id-file /tmp/tb.id --progress never "$@" >"$R/tb-$name.$r.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}"; local rc=$?; wait "${pids[1]}"
  log "tb $name rc=$rc"; tail -12 "$R/tb-$name.0.txt"; tail -3 "$R/tb-$name.1.txt"
  pack
}
tb hs "$D/context" --coll allreduce -b 8 -e 8 -n 2 -w 1 --hotswap-attr ll_max_bytes
tb nohs "$D/context" --coll allreduce -b 8 -e 8 -n 2 -w 1 --hotswap=false --json
# one GPU, in process, 2 ranks: same hot swap
THESEUS_DEBUG=INFO THESEUS_DEBUG_SUBSYS=ALL THESEUS_DEBUG_FILE=$R/logs/inproc.%p timeout 60 "$D/theseus-bench" --backend cuda --nranks 2 --coll allreduce -b 8 -e 8 -n 2 -w 1 --progress never >"$R/tb-inproc.txt" 2>&1
log "tb inproc rc=$?"; tail -12 "$R/tb-inproc.txt"; pack
wait $b1; log "build rc=$?"
TH=$ROOT/build/nccl-tests
nt() { # nt NAME CTX PTXDIR ARGS...
  local name=$1 ctx=$2 ptx=$3; shift 3
  env LD_LIBRARY_PATH="$TH/minimpi/lib:$D/prefix/lib" THESEUS_BACKEND=cuda THESEUS_SELECTION_CONTEXT="$ctx" THESEUS_TIMEOUT=60000 \
    THESEUS_PTX_DIR="$ptx" THESEUS_DEBUG=WARN THESEUS_DEBUG_FILE=$R/logs/$name.%p \
    timeout 90 "$ROOT/ncclabi/gpu/minimpirun.sh" 2 "$TH/all_reduce_perf" "$@" >"$R/nt/$name.txt" 2>&1
  log "nt $name rc=$?"; grep -E "^ +[0-9]+ " "$R/nt/$name.txt" | awk '{print "   ", $1, $6, $8, $9, $10}' | tail -5
  pack
}
for v in "" acq relax both nolf; do
  p=""; [ -n "$v" ] && p=$D/lat/$v
  nt lat-${v:-base} "$D/context" "$p" -b 8 -e 64K -f 8 -n 2000 -w 200 -g 1 -c 1
done
nt lat-base-cputime "$D/context" "" -b 8 -e 64K -f 8 -n 2000 -w 200 -g 1 -c 1 -C 1
nt lat-both-graph "$D/context" "$D/lat/both" -b 8 -e 64K -f 8 -n 2000 -w 200 -g 1 -c 1 -G 1
nt graph-k32 "$D/ctx/k32" "" -b 8 -e 1G -f 8 -n 10 -w 3 -g 1 -c 1 -G 1
log done
