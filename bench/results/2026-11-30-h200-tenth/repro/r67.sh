#!/usr/bin/env bash
# Device call 67 (2026-11-30, tenth run), at the final code (the ctest programs share pair.h and cudadl.h; the record lost a field): replay_check, callbench (same and
# cycle, replay on/off, 2 rounds; theseusStreamSynchronize no longer stops the record), and
# TestLatency.
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r67; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 THESEUS_PREFIX=$D/prefix
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|^LAT|^(REPLAYCHECK|  HOST|  CHECK.*FAIL|  FAIL|  destroyed)" $R/$n.txt | sort | uniq -c | head -30; }
s replay-check 120 bash ncclabi/gpu/run_replay_check.sh
s callbench 120 env ROUNDS=2 bash ncclabi/gpu/run_callbench.sh
grep -h "RESULT" $R/callbench.txt 2>/dev/null | head -4
s latency 60 $D/cuda.test -test.run 'TestLatency$' -lat
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r67.tgz r67 && rm -rf r67
