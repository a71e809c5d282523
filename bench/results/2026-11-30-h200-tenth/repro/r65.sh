#!/usr/bin/env bash
# Device call 65 (2026-11-30, tenth run), binaries at 3449e57: PyTorch (torch_check.py with its new
# training-loop check: four buckets all-reduced in place step after step), 2 and 4 ranks, with
# INIT-only logs (repeats launched from C) and then with INFO COLL logs (every call through Go).
set -uo pipefail
D=$PWD/.device; tar xzf $D/all.tgz -C $D
R=$OUT/r65; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 THESEUS_PREFIX=$D/prefix
T0=$(date +%s)
for mode in init coll; do
  sub=INIT; [ $mode = coll ] && sub=INIT,COLL
  echo "== +$(( $(date +%s) - T0 ))s torch $mode"
  RESULTS=$R/$mode THESEUS_DEBUG_SUBSYS=$sub timeout 200 bash ncclabi/gpu/run_torch_check.sh > $R/torch-$mode.txt 2>&1; echo "rc=$?"
  grep -E "^\|" $R/$mode/torch/summary.md | tail -2
  grep -h "repeated all_reduce" $R/$mode/torch/*.txt | sort | uniq -c | head -8
  grep -ho "destroyed: [0-9]* requests served natively ([0-9]* of them launched from C)" $R/$mode/torch/*.txt | sort | uniq -c | head
done
echo "== +$(( $(date +%s) - T0 ))s done"
cd $OUT && tar czf r65.tgz r65 && rm -rf r65
