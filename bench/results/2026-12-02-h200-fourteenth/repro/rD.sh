#!/usr/bin/env bash
# Device call D (2026-12-02, fourteenth run; carry .device/f, .device/ctx, third_party): the
# final default context (one-channel LL up to 2 KiB, the wide LL above on one node, ll_max_bytes
# 262144) and the LL threads rule, against the context before this run (ctx/old):
#   1. BenchmarkLatency, new and old context;
#   2. nccl-tests all_reduce, all_gather, reduce_scatter, alltoall, broadcast, reduce at 2 and 4
#      ranks (8 B - 1 MiB, #wrong); all_reduce eager and -G 1 at 2 ranks (8 B - 64 KiB);
#      all_reduce at 128 MiB (busbw, no regression above 1 MiB);
#   3. the sweeps: allreduce 2 processes and 4 ranks in one process, the other collectives at 2;
#   4. TestGraph, PyTorch's checks at 2 ranks.
CALL=rD
tar xJf .device/f/dev.txz -C .device  # always this call's build (a warm machine keeps older files)
DEADLINE=${DEADLINE:-400}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/
(THESEUS_PREFIX=$D/prefix bash $D/build_nccl_tests.sh > $W/build/log.txt 2>&1; echo "build rc=$?" >> $W/build/log.txt) &
BL=$!
LB='Latency/[0-9]+B/(eager|graph)$'
s lat-new 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x
s lat-oldctx 30 $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x -comms.context=$D/ctx/old
s gputests 60 $D/cuda.test -test.run 'TestGraph' -test.v
wait $BL; echo "== +$(( $(date +%s) - T0 ))s $(tail -2 $W/build/log.txt | tr '\n' ' ')"
s nccl-wrong 80 env SIZES="-b 8 -e 1M -f 4" ITERS="-n 5 -w 2" NRANKS="2 4" MODES=ldpath TESTS="all_reduce all_gather reduce_scatter alltoall broadcast reduce" THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
for g in 0 1; do
  s nccl-g$g 40 env SIZES="-b 8 -e 64K -f 2" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
done
s nccl-128m 40 env SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
cat > $W/sweep2.sh <<EOS
export THESEUS_ALLOW_SHARED_DEVICE=1 CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe
nvidia-cuda-mps-control -d
rm -f /tmp/sweep.id
for r in 1 0; do RANK=\$r WORLD_SIZE=2 $D/theseus-bench sweep --backend cuda --id-file /tmp/sweep.id "\$@" >\$OUT/sweep.\$r.out 2>&1 & done
wait
cat \$OUT/sweep.0.out
echo quit | nvidia-cuda-mps-control
EOS
s sweep-allreduce 100 bash $W/sweep2.sh -b 8 -e 1M -f 2 --coll allreduce --save $W/sweep-allreduce/sweep.json
s sweep-others 60 $D/theseus-bench sweep --backend cuda --nranks 2 -b 8 -e 1M -f 4 --coll allgather,reducescatter,alltoall --save $W/sweep-others/sweep.json
s sweep4 60 $D/theseus-bench sweep --backend cuda --nranks 4 -b 8 -e 1M -f 4 --coll allreduce --save $W/sweep4/sweep.json
s torch 80 env NRANKS=2 bash ncclabi/gpu/run_torch_check.sh
for f in $W/*/log.txt; do n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done > $W/lat-summary.txt
awk '{k=$3; split($2,a,"-"); v[k" "a[2]]=v[k" "a[2]]" "$4} END {for (x in v) print x, v[x]}' $W/lat-summary.txt | sort
awk 'FNR == 1 { g = (FILENAME ~ /nccl-g1/) } /^ *[0-9]+ +[0-9]+ +float/ { t[g, $1] = $6; sizes[$1] = 1 }
  END { for (s in sizes) if (t[0, s] > 0 && t[1, s] > 0) printf "NT %8d B eager %8.2f us graph %8.2f us ratio %.2f\n", s, t[0, s], t[1, s], t[0, s] / t[1, s] }' \
  $W/nccl-g0/nccl-tests/ldpath-n2-all_reduce.txt $W/nccl-g1/nccl-tests/ldpath-n2-all_reduce.txt 2>/dev/null | sort -k2 -n
grep -h "^| ldpath" $W/nccl-wrong/nccl-tests/summary.md
grep -h -E "^ +[0-9]+ +[0-9]+ +float" $W/nccl-128m/nccl-tests/*.txt
grep -h -A4 "Fastest by size\|Findings" $W/sweep*/log.txt | head -40
echo "== +$(( $(date +%s) - T0 ))s done"
pack
