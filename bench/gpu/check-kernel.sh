#!/usr/bin/env bash
# check-kernel.sh — a short GPU check (about 3 minutes on one H200) that a
# change to the executor kernel left it behaving and performing as before:
# the embedded kernel (new) and the embedded modules of an older commit
# (old, loaded through THESEUS_PTX_DIR) in the same run.
#
#   (here)   OLD_PTX=34d87e3 bash bench/gpu/prepare.sh
#   (device, carry .device) bash bench/gpu/check-kernel.sh
#
# Results go to $OUT/kernel-check.tgz (one file; steps.txt summarises).
# Success: every step rc=0; TestKernelModules passes (the embedded modules
# hold theseus_exec, theseus_units and theseus_clock only); GRAPH lines wrong=0 for new
# and old; DIFF ... 0 mismatched; RUNTIME/ok for TestRuntimeCollectives;
# BenchmarkLatency us/call and the "BW best" of-memcpy of new and old
# within the run-to-run spread (a few percent).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/kernel-check.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL"
PACK=kernel-check.tgz
SUMMARY="^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|KERNEL|DIFF)|^Benchmark(Latency|BandwidthMemcpy)"
# shellcheck source=bench/gpu/steps.sh
source "$ROOT/bench/gpu/steps.sh"
trap pack EXIT
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
DEADLINE=${DEADLINE:-540}
OLD=$D/old-ptx
[ -f "$OLD/theseus_float32.ptx" ] || { echo "no $OLD: run OLD_PTX=<commit> bash bench/gpu/prepare.sh first" >&2; exit 2; }
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?'), old modules: $(cat "$OLD/COMMIT" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"
C=$D/cuda.test
# 1. The embedded modules: their entry points (no GPU), every module's first load (the JIT).
step modules 200 "$C" -test.run 'TestKernelModules|TestModuleLoad' -test.v
# 2. Behaviour: graph capture and 1000 replays, every collective through the runtime, and a
#    differential sample (generators at 2 ranks and one rank's shared work, every 21st case).
step graph-new 90 "$C" -test.run TestGraph -test.v
step graph-old 90 env THESEUS_PTX_DIR="$OLD" "$C" -test.run TestGraph -test.v
step runtime 60 "$C" -test.run TestRuntimeCollectives -test.v
step diff 120 "$C" -test.run 'TestDifferential/programs/(ring|direct|oneshot|twoshot|bw)/.*/n[12]$' -diff.sample=21 -diff.corpus=/nonexistent -test.v
# 3. Performance, new and old interleaved: 2-rank latency (eager and replayed), op bandwidth.
for k in 1 2; do
  step latency-new-$k 30 "$C" -test.run xxx -test.bench Latency -test.benchtime 1000x
  step latency-old-$k 30 env THESEUS_PTX_DIR="$OLD" "$C" -test.run xxx -test.bench Latency -test.benchtime 1000x
done
step bandwidth 120 "$C" -test.run xxx -test.bench 'Bandwidth(Memcpy)?$' -test.benchtime 50x -bw.variants="$OLD" -bw.refs="$D/bench/refs"
bwbest "$R/bandwidth.txt" | tee "$R/bandwidth-best.txt" | sed 's/^/   /' | tee -a "$R/steps.txt"
log done
