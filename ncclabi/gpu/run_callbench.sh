#!/usr/bin/env bash
# run_callbench.sh — host time of one ncclAllReduce called from C through
# libtheseus_nccl.so on the CUDA backend (issue 6 b through the NCCL ABI;
# docs/ncclabi.md, "Launches from C"): 2 processes on one GPU under MPS,
# ncclabi/testdata/ctest/callbench.c built here with the system compiler
# against the installed nccl.h, a float32 sum of 256 elements per rank,
# the same buffers and stream every call ("same"), and buffers moved by
# one message per call over 8 positions ("cycle", as nccl-tests does).
#
#   THESEUS_PREFIX=.device/prefix bash ncclabi/gpu/run_callbench.sh
#
# Variables: ROUNDS (default 3: each round runs THESEUS_REPLAY=1 then =0),
# ITERS (calls per measurement, default 20000), BYTES (default 1024).
# Each rank prints its own RESULT line; host_ns is its wall time per call
# less its time inside cuLaunchKernel per call (THESEUS_TIME_LAUNCHES=1);
# the script prints both ranks' lines and, as HOST, the larger host_ns
# (the slower rank, as BenchmarkCallHost reports), per THESEUS_REPLAY setting.
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
export THESEUS_DEBUG=WARN THESEUS_DEBUG_SUBSYS=INIT THESEUS_TIME_LAUNCHES=1 CALLBENCH_CUDA=1
export CALLBENCH_COLLS=${CALLBENCH_COLLS:-allreduce} CALLBENCH_VARIANTS=${CALLBENCH_VARIANTS:-same,cycle}
export CALLBENCH_ITERS=${ITERS:-20000} CALLBENCH_BYTES=${BYTES:-1024}
start_mps
trap stop_mps EXIT
W=$(mktemp -d /tmp/callbench.XXXXXX)
cc -O2 -Wall -I"$PREFIX/include" -o "$W/callbench" "$ROOT/ncclabi/testdata/ctest/callbench.c" \
  -L"$PREFIX/lib" -ltheseus_nccl -Wl,-rpath,"$PREFIX/lib" -ldl || exit 2
run() { # run REPLAY ROUND
  local out=$W/r$2-$1
  echo "replay=$1 round $2"
  THESEUS_REPLAY=$1 run_pair "$out" "$W/callbench"
  grep -h -E "^(RESULT|REF|FAIL)" "$out.0" "$out.1" | sed "s/^/  /"
  awk '/^RESULT/ { for (i = 1; i < NF; i++) if ($i == "host_ns") h = $(i+1); if (h > m[$3]) m[$3] = h }
       END { for (v in m) printf "  HOST replay='"$1"' %s max host_ns/call %.1f\n", v, m[v] }' "$out.0" "$out.1"
}
for r in $(seq "${ROUNDS:-3}"); do
  run 1 "$r"
  run 0 "$r"
done
