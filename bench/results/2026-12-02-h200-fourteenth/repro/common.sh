# Sourced by rB.sh .. rE.sh after CALL is set: unpacks this call's build (.device/f/dev.txz;
# rB.sh ran with the same files as dev.tgz), sources the eleventh run's step runner (s, pack,
# D, W, T0), and gives the steps these calls share.
tar xJf .device/f/dev.txz -C .device  # always this call's build (a warm machine keeps older files)
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY $W/build
cp $D/f/build_nccl_tests.sh $D/
# build_nccl_tests: nccl-tests against this call's prefix, in the background (wait_nccl_tests).
build_nccl_tests() {
  (THESEUS_PREFIX=$D/prefix bash $D/build_nccl_tests.sh > $W/build/log.txt 2>&1; echo "build rc=$?" >> $W/build/log.txt) &
  BL=$!
}
wait_nccl_tests() { wait $BL; echo "== +$(( $(date +%s) - T0 ))s $(tail -2 $W/build/log.txt | tr '\n' ' ')"; }
# $W/sweep2.sh ARGS: theseus-bench sweep as 2 processes under MPS (rank 0's output).
cat > $W/sweep2.sh <<EOS
export THESEUS_ALLOW_SHARED_DEVICE=1 CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe
nvidia-cuda-mps-control -d
rm -f /tmp/sweep.id
for r in 1 0; do RANK=\$r WORLD_SIZE=2 $D/theseus-bench sweep --backend cuda --id-file /tmp/sweep.id "\$@" >\$OUT/sweep.\$r.out 2>&1 & done
wait
cat \$OUT/sweep.0.out
echo quit | nvidia-cuda-mps-control
EOS
# nccl_g01: nccl-tests all_reduce at 2 ranks, 8 B - 64 KiB, eager (-G 0) and graph (-G 1).
nccl_g01() {
  local g
  for g in 0 1; do
    s nccl-g$g ${1:-40} env SIZES="-b 8 -e 64K -f 2" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath TESTS=all_reduce THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh
  done
}
# summaries: BenchmarkLatency per step (LAT lines, then by size), nccl-tests eager over -G 1
# (NT lines), the #wrong table and the sweeps' findings.
summaries() {
  local f n
  for f in $W/*/log.txt; do n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done > $W/lat-summary.txt
  awk '{k=$3; split($2,a,"-"); v[k" "a[2]]=v[k" "a[2]]" "$4} END {for (x in v) print x, v[x]}' $W/lat-summary.txt | sort
  awk 'FNR == 1 { g = (FILENAME ~ /nccl-g1/) } /^ *[0-9]+ +[0-9]+ +float/ { t[g, $1] = $6; sizes[$1] = 1 }
    END { for (s in sizes) if (t[0, s] > 0 && t[1, s] > 0) printf "NT %8d B eager %8.2f us graph %8.2f us ratio %.2f\n", s, t[0, s], t[1, s], t[0, s] / t[1, s] }' \
    $W/nccl-g0/nccl-tests/ldpath-n2-all_reduce.txt $W/nccl-g1/nccl-tests/ldpath-n2-all_reduce.txt 2>/dev/null | sort -k2 -n
  grep -h "^| ldpath" $W/nccl-wrong/nccl-tests/summary.md 2>/dev/null
  grep -h -A4 "Fastest by size\|Findings" $W/sweep*/log.txt 2>/dev/null | head -40
}
