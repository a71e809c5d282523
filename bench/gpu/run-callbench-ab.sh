#!/usr/bin/env bash
# run-callbench-ab.sh — host time per repeated call, before and after a
# change, in one device call (issue 21: the launch plan must keep what the
# fast paths bought). Needs .device/ab/ab.tgz (bench/gpu/prepare-ab.sh).
#
#   (here)   BEFORE=34d87e3 bash bench/gpu/prepare-ab.sh
#   (device, carry [".device/ab"]) bash bench/gpu/run-callbench-ab.sh
#
# ROUNDS times (default 3), interleaved before/after:
#   - ncclabi/gpu/run_callbench.sh (ROUNDS=1) with each build's library:
#     a repeated 1 KiB ncclAllReduce from C, 2 processes under MPS, host
#     time less the time inside cuLaunchKernel (THESEUS_TIME_LAUNCHES=1),
#     "same" buffers and 8 in turn ("cycle"), THESEUS_REPLAY=1 (launched
#     from C) and =0 (through Go);
#   - BenchmarkCallHost -test.count 2 with each build's cuda.test: the Go
#     API's cache-hit call, 2 ranks as goroutines, host time less
#     cuLaunchKernel, allocs/call.
# Output: $OUT/callbench-ab/ (every step's output, summary.txt). The
# summary lists, per build, every "HOST replay=R VARIANT max host_ns/call N"
# line and every BenchmarkCallHost line; compare the two builds' lines
# (benchstat before.txt after.txt on the Benchmark lines). Success: both
# builds run every step (rc 0), and after's replay=1 host_ns is no worse
# than before's beyond the run-to-run spread (issue 21: no worse than
# 177-619 ns), after's BenchmarkCallHost host-ns/call likewise, with
# allocs/call 0 or the epochs' fraction (~0.02).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
AB=$ROOT/.device/ab/ab.tgz
[ -f "$AB" ] || { echo "no $AB: run bench/gpu/prepare-ab.sh first" >&2; exit 2; }
RES=${OUT:-$ROOT/build}/callbench-ab
mkdir -p "$RES"
X=$(mktemp -d /tmp/callbench-ab.XXXXXX)
tar xzf "$AB" -C "$X"
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "before: $(head -1 "$X/before/COMMIT")"
  echo "after: $(head -1 "$X/after/COMMIT")"
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1
} | tee "$RES/machine.txt"
rc=0
for r in $(seq "${ROUNDS:-3}"); do
  for b in before after; do
    echo "== round $r $b: callbench"
    cb=$X/$b/tree/ncclabi/gpu/run_callbench.sh # the build's own script and callbench.c
    [ -f "$cb" ] || cb=$ROOT/ncclabi/gpu/run_callbench.sh
    THESEUS_PREFIX="$X/$b/prefix" ROUNDS=1 RESULTS="$RES" timeout 240 bash "$cb" \
      >"$RES/callbench-$b-$r.txt" 2>&1 || { echo "   rc=$?"; rc=1; }
    grep -h "HOST" "$RES/callbench-$b-$r.txt" | sed "s/^ */   $b /"
  done
  for b in before after; do
    echo "== round $r $b: BenchmarkCallHost"
    (cd "$ROOT/cuda" && timeout 240 "$X/$b/cuda.test" -test.run '^$' -test.bench '^BenchmarkCallHost$' -test.count 2) \
      >"$RES/callhost-$b-$r.txt" 2>&1 || { echo "   rc=$?"; rc=1; }
    grep -h "^BenchmarkCallHost" "$RES/callhost-$b-$r.txt" | sed "s/^/   $b /"
  done
done
for b in before after; do
  {
    echo "== $b"
    cat "$RES"/callbench-$b-*.txt | grep -h "HOST"
    cat "$RES"/callhost-$b-*.txt | grep -h "^BenchmarkCallHost"
  } >>"$RES/summary.txt"
  cat "$RES"/callhost-$b-*.txt | grep -h "^Benchmark" >"$RES/callhost-$b.bench"
done
cat "$RES/summary.txt"
exit $rc
