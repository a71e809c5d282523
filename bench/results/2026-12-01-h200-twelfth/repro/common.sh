# Sourced by the twelfth run's call scripts (r*.sh here). Copied from the eleventh run's
# final-common.sh. Unpacks .device/f/dev.tgz (built here by bench/gpu/prepare.sh: cuda.test, the
# NCCL prefix, theseus-bench, the specialised context, proxy.test, ...) into .device, and runs
# each acceptance script with its results under $W/<name>, packed into $OUT/$CALL.tgz after
# every step (the device tool returns at most 8 files).
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
[ -f $D/cuda.test ] || tar xzf $D/f/dev.tgz -C $D
W=/tmp/$CALL; mkdir -p $W
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export THESEUS_PREFIX=$D/prefix PYTHONUNBUFFERED=1
T0=$(date +%s)
DEADLINE=${DEADLINE:-575}
pack() { (cd /tmp && tar czf $OUT/$CALL.tgz.tmp $CALL && mv $OUT/$CALL.tgz.tmp $OUT/$CALL.tgz); }
left() { echo $(( DEADLINE - ($(date +%s) - T0) )); }
# s NAME BOUND CMD...: runs CMD with OUT and RESULTS under $W/NAME, bounded by BOUND and by
# the call's deadline; prints the summary lines.
s() {
  local n=$1 t=$2; shift 2
  local l; l=$(left); [ $l -lt 15 ] && { echo "== $n skipped: the call's time is spent"; return; }
  [ $t -gt $l ] && t=$l
  mkdir -p $W/$n
  echo "== +$(( $(date +%s) - T0 ))s $n (bound ${t}s)"
  OUT=$W/$n RESULTS=$W/$n DEADLINE=$((t - 10)) timeout $t "$@" > $W/$n/log.txt 2>&1
  echo "rc=$?"
  # A step cut short may leave its MPS daemon (the scripts use two pipe directories).
  for p in /tmp/mps-pipe /tmp/theseus-mps-pipe; do echo quit | CUDA_MPS_PIPE_DIRECTORY=$p timeout 5 nvidia-cuda-mps-control >/dev/null 2>&1; done
  pkill -f nvidia-cuda-mps-server 2>/dev/null; sleep 1
  for f in $W/$n/*.tgz; do [ -f "$f" ] && tar xzf "$f" -C $W/$n 2>/dev/null && rm -f "$f"; done
  grep -rhE "^(--- FAIL|FAIL|ok |PASS)|mismatched|panic:|^(GRAPH|DIFF|DIFFSPEC|PERSISTENT|RESIDENT|LAT|NCCL|NT |BW128M|TRACE|SHIFT|LOSTPEER|SIGSTACK|TORCHCHECK|RESULT|RESILIENCE|P2P|REPLAYCHECK)|Wrong elements|rc=[0-9]" $W/$n 2>/dev/null | sort | uniq -c | sort -rn | head -30
  pack
}
