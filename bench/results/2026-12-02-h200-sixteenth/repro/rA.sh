#!/usr/bin/env bash
# Device call A (2026-12-02, sixteenth run; carry .device, third_party): issue 24 on one H200,
# 2 simulated nodes (processes under MPS, UCX over TCP on loopback), nccl-tests through
# bench/gpu/run-nodes.sh. Why the Simple schedules across nodes cost about 10 ms at every size
# from 128 KiB to 8 MiB (twelfth run, call G3), and the LL put fix (every thread waits for the
# packets; v/old is the kernel before it, v/new after, both measurement builds):
#   1. nccl-tests built (Theseus and the machine's NCCL), returned as $OUT/nccl-bin.tgz;
#      NCCL's socket transport 2 and 4 ranks, all_reduce and all_gather;
#   2. Theseus 2x1 tcp all_reduce and all_gather, 8 B - 128 MiB (the product);
#   3. the LL put A/B: all_reduce 8 B - 256 KiB, kernels v/old and v/new;
#   4. a trace (THESEUS_TRACE) of 2x1 all_reduce at 1 MiB;
#   5. knobs at 128 KiB - 4 MiB: THESEUS_PROXY_SPIN=0, GOMAXPROCS=16, async preemption on;
#   6. Theseus 2x2 tcp all_reduce 8 B - 128 MiB.
set -uo pipefail
ROOT=$PWD; D=$ROOT/.device
T0=$(date +%s)
mkdir -p $OUT/r
nodes() { # nodes NAME DEADLINE VAR=VALUE...: one run-nodes.sh, its results as $OUT/r/NAME.tgz
  local n=$1 dl=$2; shift 2
  local l=$(( ${LIMIT:-570} - ($(date +%s) - T0) ))
  [ $l -lt 30 ] && { echo "== $n skipped"; return; }
  [ $dl -gt $l ] && dl=$l
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  env "$@" OUT=$OUT/r RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh ${STEPS_:-theseus} > $OUT/r/$n.log 2>&1
  echo "rc=$?"; grep -E "^   rc=|skipped" $OUT/r/$n.log | head -20
}
STEPS_="info build nccl" nodes nccl 240 LAYOUTS="2x1 2x2" TESTS="all_reduce all_gather"
(cd build && tar czf $OUT/nccl-bin.tgz nccl-tests/*_perf nccl-tests/minimpi nccl-tests-nccl/*_perf nccl-tests-nccl/minimpi 2>/dev/null)
nodes th2x1 60 LAYOUTS=2x1 TRANSPORTS=tcp TESTS="all_reduce all_gather"
nodes ll-old 40 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce NT_SIZES="-b 8 -e 256K -f 4" EXTRA_ENV="THESEUS_PTX_DIR=$D/v/old"
nodes ll-new 40 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce NT_SIZES="-b 8 -e 256K -f 4" EXTRA_ENV="THESEUS_PTX_DIR=$D/v/new"
mkdir -p /tmp/trace
nodes trace 30 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce NT_SIZES="-b 1M -e 1M" NT_ITERS="-n 3 -w 1" EXTRA_ENV="THESEUS_TRACE=/tmp/trace/t.%p.json"
tar czf $OUT/trace.tgz -C /tmp trace
nodes spin0 30 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce NT_SIZES="-b 128K -e 4M -f 4" THESEUS_PROXY_SPIN=0
nodes procs16 30 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce NT_SIZES="-b 128K -e 4M -f 4" EXTRA_ENV="GOMAXPROCS=16"
nodes preempt 30 LAYOUTS=2x1 TRANSPORTS=tcp TESTS=all_reduce NT_SIZES="-b 128K -e 4M -f 4" EXTRA_ENV="GODEBUG=asyncpreemptoff=0"
nodes th2x2 60 LAYOUTS=2x2 TRANSPORTS=tcp TESTS=all_reduce
echo "== +$(( $(date +%s) - T0 ))s done"
