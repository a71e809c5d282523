#!/usr/bin/env bash
# Device call 29 (2026-11-29, seventh run): host time per call at the session's last commit, then the clients (theseus-bench cuda, MPS, nccl-tests, PyTorch).
set -uo pipefail
D=$PWD/.device; R=$OUT/r29; mkdir -p $R
tar xzf $D/bin.tgz -C $D
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; lscpu | grep -E "Model name|^CPU\(s\)|Hypervisor|L1d|L1i|L2|L3"; } > $R/machine.txt 2>&1
T0=$(date +%s)
s() { local n=$1 t=$2; shift 2; echo "== +$(( $(date +%s) - T0 ))s $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|Benchmark" $R/$n.txt | sed -E 's/[0-9.]+ (allocs|cgo-ns|clock-ns)[^\t]*\t//g' | head -30; }
s callhost 90 $D/cuda.test -test.run xxx -test.bench 'CallHost$' -test.benchtime 20000x -test.count 4
s dist 60 $D/cuda.test -test.run xxx -test.bench 'CallHostDist' -test.benchtime 20000x -test.count 3
echo "== +$(( $(date +%s) - T0 ))s clients"
DEADLINE=480 bash bench/gpu/run-all.sh clients 2>&1 | tail -40
echo "== +$(( $(date +%s) - T0 ))s done"
