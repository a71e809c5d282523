#!/usr/bin/env bash
# Device calls 58 and 59 (2026-11-30, tenth run): on a fresh machine each, the host time of
# ncclAllReduce through the NCCL ABI (callbench: same and cycle, replay on/off, 3 rounds) and the
# replay checks again (b9da30d). Usage: bash .device/r58.sh NAME
set -uo pipefail
N=${1:-r58}
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/$N; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 THESEUS_PREFIX=$D/prefix
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(REPLAYCHECK|  HOST|  CHECK.*FAIL|  FAIL)" $R/$n.txt | head -40; }
s callbench 200 env ROUNDS=3 bash ncclabi/gpu/run_callbench.sh
s replay-check 200 bash ncclabi/gpu/run_replay_check.sh
lscpu | grep -E "Model name|MHz" > $R/cpu.txt 2>&1
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf $N.tgz $N && rm -rf $N
