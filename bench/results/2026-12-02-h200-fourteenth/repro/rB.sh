#!/usr/bin/env bash
# Device call B (2026-12-02, fourteenth run; carry .device/f, .device/ctx, third_party): the
# default context with the wide LL entries (a channel per chunk above 4 KiB) and the LL threads
# rule per threadblock (cuda threadBytes), against the context before (.device/ctx/old):
#   1. BenchmarkLatency (2 ranks as goroutines), new and old context interleaved twice, and
#      THESEUS_NTHREADS=128 / 64 on the new one;
#   2. GPU tests: TestGraph, TestRuntimeCollectives, a differential sample of the all-pairs
#      programs (the k16/k8 wide LL ones included);
#   3. theseus-bench sweep: allreduce, 2 processes under MPS, 8 B - 1 MiB; the other
#      collectives in one process;
#   4. nccl-tests all_reduce_perf, 2 ranks under MPS, eager (-G 0) and graph (-G 1), 8 B - 64 KiB.
CALL=rB
tar xzf .device/f/dev.tgz -C .device  # always this call's build (a warm machine keeps older files)
DEADLINE=${DEADLINE:-570}
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
mkdir -p $W/build
cp $D/f/build_nccl_tests.sh $D/
(THESEUS_PREFIX=$D/prefix bash $D/build_nccl_tests.sh > $W/build/log.txt 2>&1; echo "build rc=$?" >> $W/build/log.txt) &
BL=$!
for k in 1 2; do
  s lat-new-$k 30 $D/cuda.test -test.run xxx -test.bench 'Latency/[0-9]+B/(eager|graph)$' -test.benchtime 1000x
  s lat-old-$k 30 $D/cuda.test -test.run xxx -test.bench 'Latency/[0-9]+B/(eager|graph)$' -test.benchtime 1000x -comms.context=$D/ctx/old
done
s lat-t128 30 env THESEUS_NTHREADS=128 $D/cuda.test -test.run xxx -test.bench 'Latency/[0-9]+B/(eager|graph)$' -test.benchtime 1000x
s lat-t64 30 env THESEUS_NTHREADS=64 $D/cuda.test -test.run xxx -test.bench 'Latency/[0-9]+B/(eager|graph)$' -test.benchtime 1000x
s gputests 100 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives' -test.v
s diff 60 $D/cuda.test -test.run 'TestDifferential/programs/(oneshot|direct|twoshot)/' -diff.sample=41 -diff.corpus=/nonexistent -test.v
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
s sweep-allreduce 110 bash $W/sweep2.sh -b 8 -e 1M -f 2 --coll allreduce --save $W/sweep-allreduce/sweep.json
s sweep-others 80 $D/theseus-bench sweep --backend cuda --nranks 2 -b 8 -e 1M -f 4 --coll allgather,reducescatter,alltoall --save $W/sweep-others/sweep.json
wait $BL; echo "== +$(( $(date +%s) - T0 ))s $(tail -2 $W/build/log.txt | tr '\n' ' ')"
for g in 0 1; do
  s nccl-g$g 60 env SIZES="-b 8 -e 64K -f 2" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
done
for f in $W/*/log.txt; do n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done > $W/lat-summary.txt
awk '{k=$3; split($2,a,"-"); v[k" "a[2]]=v[k" "a[2]]" "$4} END {for (x in v) print x, v[x]}' $W/lat-summary.txt | sort
awk 'FNR == 1 { g = (FILENAME ~ /nccl-g1/) } /^ *[0-9]+ +[0-9]+ +float/ { t[g, $1] = $6; sizes[$1] = 1 }
  END { for (s in sizes) if (t[0, s] > 0 && t[1, s] > 0) printf "NT %8d B eager %8.2f us graph %8.2f us ratio %.2f\n", s, t[0, s], t[1, s], t[0, s] / t[1, s] }' \
  $W/nccl-g0/nccl-tests/ldpath-n2-all_reduce.txt $W/nccl-g1/nccl-tests/ldpath-n2-all_reduce.txt 2>/dev/null | sort -k2 -n
grep -h -A3 "Fastest by size\|Findings" $W/sweep-*/log.txt | head -30
echo "== +$(( $(date +%s) - T0 ))s done"
pack
