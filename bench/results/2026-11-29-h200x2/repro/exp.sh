#!/usr/bin/env bash
# exp.sh — call 2 of 2026-11-29 (fourth session): channels variants on 2 GPUs,
# kernel durations under ncu, the 2-rank hot swap.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/exp.XXXXXX)
FINAL=${OUT:-$ROOT/build}; mkdir -p "$FINAL" "$R/nt"
pack() { tar czf "$FINAL/exp.tgz.tmp" -C "$R" . && mv "$FINAL/exp.tgz.tmp" "$FINAL/exp.tgz"; }
trap pack EXIT
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 GODEBUG=asyncpreemptoff=1
export CUDA_VISIBLE_DEVICES=0,1
T0=$(date +%s)
log() { echo "== +$(($(date +%s) - T0))s $*" | tee -a "$R/steps.txt"; }
cat "$D/COMMIT" >"$R/commit.txt"
(cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
  THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/build-theseus.txt" 2>&1 &
b1=$!
bash "$D/build_nccl_baseline.sh" >"$R/build-nccl.txt" 2>&1 &
b2=$!
tb() { # tb NAME CTX ARGS...
  local name=$1 ctx=$2; shift 2
  rm -f /tmp/tb.id
  local pids=()
  for r in 0 1; do
    THESEUS_SELECTION_CONTEXT=$ctx RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r timeout 100 "$D/theseus-bench" --backend cuda \
      --id-file /tmp/tb.id --progress never "$@" >"$R/tb-$name.$r.txt" 2>&1 &
    pids+=($!)
  done
  wait "${pids[0]}"; local rc=$?; wait "${pids[1]}"
  log "tb $name rc=$rc"; grep -E "^ +[0-9]+ " "$R/tb-$name.0.txt" | awk '{print "   ", $1, $7, $8, $NF}' | tail -6
  pack
}
# 1. Channels, through theseus-bench (while nccl-tests builds).
for k in 1 8 16 32; do
  tb k$k "$D/ctx/k$k" --coll allreduce,alltoall -b 1M -e 1G -f 32 -n 5 -w 2 --hotswap=false
done
# 2. The hot swap at 2 ranks (ll_max_bytes), the default context.
tb hotswap "$D/context" --coll allreduce -b 8 -e 8 -n 2 -w 1 --hotswap-attr ll_max_bytes --json
wait $b1; wait $b2
log "builds done"; tail -2 "$R/build-theseus.txt" "$R/build-nccl.txt"
TH=$ROOT/build/nccl-tests NC=$ROOT/build/nccl-tests-nccl
NCLIB=$(dirname "$(readlink -f "$NC/nccl-home/lib/libnccl.so.2")")
nt() { # nt NAME LIB CTX TEST ARGS...
  local name=$1 lib=$2 ctx=$3 t=$4; shift 4
  if [ "$lib" = theseus ]; then
    env LD_LIBRARY_PATH="$TH/minimpi/lib:$D/prefix/lib" THESEUS_BACKEND=cuda THESEUS_SELECTION_CONTEXT="$ctx" THESEUS_TIMEOUT=60000 \
      timeout 120 "$ROOT/ncclabi/gpu/minimpirun.sh" 2 "$TH/${t}_perf" "$@" >"$R/nt/$name.txt" 2>&1
  else
    env LD_LIBRARY_PATH="$NC/minimpi/lib:$NCLIB" timeout 120 "$ROOT/ncclabi/gpu/minimpirun.sh" 2 "$NC/${t}_perf" "$@" >"$R/nt/$name.txt" 2>&1
  fi
  log "nt $name rc=$?"; grep -E "^ +[0-9]+ " "$R/nt/$name.txt" | awk '{print "   ", $1, $6, $8, $9}' | tail -4
  pack
}
# 3. Channels through nccl-tests, large messages.
for k in 16 32; do
  for t in all_reduce all_gather reduce_scatter alltoall broadcast; do
    nt th-k$k-$t theseus "$D/ctx/k$k" $t -b 16M -e 8G -f 8 -n 5 -w 2 -g 1 -c 1
  done
done
# 4. Small messages: per-call time, eager, at 8 B over 2000 calls; nccl and theseus.
nt small-nccl nccl - all_reduce -b 8 -e 64K -f 8 -n 2000 -w 200 -g 1 -c 1
nt small-theseus theseus "$D/context" all_reduce -b 8 -e 64K -f 8 -n 2000 -w 200 -g 1 -c 1
# 5. Kernel durations (one-pass metric, no replay) of a small allreduce.
for lib in theseus nccl; do
  if [ $lib = theseus ]; then envs=(LD_LIBRARY_PATH="$TH/minimpi/lib:$D/prefix/lib" THESEUS_BACKEND=cuda THESEUS_SELECTION_CONTEXT="$D/context"); bin=$TH/all_reduce_perf
  else envs=(LD_LIBRARY_PATH="$NC/minimpi/lib:$NCLIB"); bin=$NC/all_reduce_perf; fi
  env "${envs[@]}" MINIMPI_ALL_OUTPUT=1 timeout 100 "$ROOT/ncclabi/gpu/minimpirun.sh" 2 \
    ncu --target-processes all --metrics gpu__time_duration.sum --launch-skip 50 --launch-count 20 \
    "$bin" -b 8 -e 8 -n 100 -w 20 -g 1 -c 0 >"$R/ncu-small-$lib.txt" 2>&1
  log "ncu small $lib rc=$?"; grep -E "gpu__time_duration" "$R/ncu-small-$lib.txt" | head -4
  pack
done
log done
