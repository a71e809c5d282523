# Sourced by this run's call scripts after CALL is set. Unpacks the call's build
# (.device/f/dev.txz: COMMIT, cuda.test, the NCCL prefix); nccl-tests 2.19.6 (carried source in
# third_party/nccl-tests, git-ignored) is built on the machine by the first call, which returns
# the binaries as $OUT/nccl-bin.txz for the later calls (.device/f/nccl-bin.txz). Sources the
# eleventh run's step runner (s, pack, left, D, W, T0) and the seventeenth run's shared steps
# (lat, nt, nodes, summaries).
tar xJf .device/f/dev.txz -C .device
if [ -f .device/f/nccl-bin.txz ]; then mkdir -p build && tar xJf .device/f/nccl-bin.txz -C build; fi
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
export NCCL_TESTS_BUILD=$ROOT/build/nccl-tests
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
LB='Latency/(8|2048|8192|32768)B/(eager|graph)$'
lat() { local n=$1; shift; s lat-$n 40 env "$@" $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x; }
# ntn NAME TEST G SIZES N [ENV...]: nccl-tests TEST at 2 ranks under MPS, -G G, -n N.
ntn() { local n=$1 t=$2 g=$3 z=$4 it=$5; shift 5; s $n 60 env "$@" SIZES="$z" ITERS="-n $it -w 20 -G $g" NRANKS=2 MODES=ldpath TESTS=$t THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh; }
nt() { local n=$1 t=$2 g=$3 z=$4; shift 4; ntn $n $t $g "$z" 50 "$@"; }
# nodes NAME DEADLINE VAR=VALUE...: one bench/gpu/run-nodes.sh, results under $W/NAME.
nodes() {
  local n=$1 dl=$2; shift 2
  local l=$(left); [ $l -lt 30 ] && { echo "== $n skipped"; return; }; [ $dl -gt $l ] && dl=$l
  echo "== +$(( $(date +%s) - T0 ))s $n (deadline ${dl}s)"
  mkdir -p $W/$n
  env "$@" OUT=$W RESULTS=$n DEADLINE=$dl timeout $((dl + 20)) bash bench/gpu/run-nodes.sh ${STEPS_:-theseus} > $W/$n/log.txt 2>&1
  echo "rc=$?"
  grep -h "connection closed" /tmp/nodes-results.*/logs/* 2>/dev/null | cut -c1-600 > $W/$n/closed.txt
  cp -r /tmp/nodes-results.*/runs /tmp/nodes-results.*/summary.md $W/$n/ 2>/dev/null; rm -rf /tmp/nodes-results.*
  grep -E "^\| (theseus|nccl) " $W/$n/summary.md 2>/dev/null | cut -d'|' -f2-9
  pack
}
# build_nccl_tests: both builds (Theseus's header, the machine's NCCL) in the background;
# wait_nccl_tests waits and returns the binaries.
build_nccl_tests() {
  mkdir -p $W/build
  (bash $D/f/build_nccl_tests.sh > $W/build/theseus.txt 2>&1; echo "rc=$?" >> $W/build/theseus.txt) &
  NB1=$!
  (bash $D/f/build_nccl_baseline.sh > $W/build/nccl.txt 2>&1; echo "rc=$?" >> $W/build/nccl.txt) &
  NB2=$!
}
wait_nccl_tests() {
  wait $NB1 $NB2
  echo "== +$(( $(date +%s) - T0 ))s nccl-tests built: $(tail -1 $W/build/theseus.txt) $(tail -1 $W/build/nccl.txt)"
  (cd build && tar cJf $OUT/nccl-bin.txz nccl-tests/*_perf nccl-tests/minimpi nccl-tests-nccl/*_perf nccl-tests-nccl/minimpi 2>/dev/null)
}
summaries() {
  local f n
  for f in $W/lat-*/log.txt; do [ -f $f ] || continue; n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done | sort -k3 -k2
  for f in $W/*/nccl-tests/ldpath-n*-*.txt; do [ -f $f ] || continue; n=$(basename $(dirname $(dirname $f))); awk -v n=$n '/^ *[0-9]+ +[0-9]+ +(float|int8)/ {print "NT", n, $1, $6, $8, $9}' $f; done | sort -k3n -k2
}
