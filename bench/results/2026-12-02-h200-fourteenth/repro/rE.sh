#!/usr/bin/env bash
# Device call E (2026-12-02, fourteenth run; carry .device/f, .device/ctx, third_party): the
# library before this run (.device/prefix-old, built at 465dec3, with its context ctx/old)
# against this run's (call D's build), nccl-tests all_reduce at 2 ranks under MPS, interleaved
# twice: 128 MiB (busbw: the Simple ring, whose threads and schedule did not change) and
# 8 B - 64 KiB eager (-G 0); then nccl-tests sendrecv_perf at 2 ranks, 8 B - 4 KiB, eager and
# -G 1, with the point-to-point engine's default threads and THESEUS_NTHREADS=64 / 128.
CALL=rE
DEADLINE=${DEADLINE:-260}
tar xJf .device/f/old.txz -C .device
source bench/results/2026-12-02-h200-fourteenth/repro/common.sh
build_nccl_tests; wait_nccl_tests
for k in 1 2; do
  for v in new old; do
    if [ $v = old ]; then P=$D/prefix-old C=$D/ctx/old; else P=$D/prefix C=$ROOT/examples/contexts/default; fi
    s $v-128m-$k 30 env THESEUS_PREFIX=$P THESEUS_SELECTION_CONTEXT=$C SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce bash ncclabi/gpu/run_nccl_tests.sh
    s $v-small-$k 30 env THESEUS_PREFIX=$P THESEUS_SELECTION_CONTEXT=$C SIZES="-b 8 -e 64K -f 2" ITERS="-n 50 -w 10 -G 0" NRANKS=2 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
  done
done
for t in def 64 128; do
  e=(); [ $t = def ] || e=(THESEUS_NTHREADS=$t)
  for g in 0 1; do
    s p2p-$t-g$g 30 env "${e[@]}" SIZES="-b 8 -e 4K -f 2" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath TESTS=sendrecv THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
  done
done
for f in $W/p2p-*/nccl-tests/ldpath-n2-sendrecv.txt; do n=$(basename $(dirname $(dirname $f))); awk -v n=$n '/^ *[0-9]+ +[0-9]+ +float/ {print "P2P", n, $1, $6, $9}' $f; done | sort -k3n -k2
for f in $W/*/nccl-tests/ldpath-n2-all_reduce.txt; do n=$(basename $(dirname $(dirname $f))); awk -v n=$n '/^ *[0-9]+ +[0-9]+ +float/ {print n, $1, $6, $8}' $f; done | sort -k2n -k1
echo "== +$(( $(date +%s) - T0 ))s done"
pack
