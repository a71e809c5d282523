# Sourced by this run's call scripts after CALL is set: unpacks the call's build
# (.device/f/dev.txz: COMMIT, cuda.test, theseus-bench, the NCCL prefix, kernel variants under
# v/), sources the eleventh run's step runner (s, pack, D, W, T0) and gives shared steps.
tar xJf .device/f/dev.txz -C .device  # always this call's build (a warm machine keeps older files)
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY $W/build
# build_nccl_tests: nccl-tests against this call's prefix, in the background (wait_nccl_tests).
build_nccl_tests() {
  if [ -x build/nccl-tests/all_reduce_perf ]; then BL=; return; fi
  (THESEUS_PREFIX=$D/prefix bash $D/f/build_nccl_tests.sh > $W/build/log.txt 2>&1; echo "build rc=$?" >> $W/build/log.txt) &
  BL=$!
}
wait_nccl_tests() { [ -z "$BL" ] || wait $BL; echo "== +$(( $(date +%s) - T0 ))s $(tail -2 $W/build/log.txt 2>/dev/null | tr '\n' ' ')"; }
LB='Latency/(8|2048|8192|32768)B/(eager|graph)$'
# lat NAME [ENV...]: BenchmarkLatency (2 ranks as goroutines) at 8 B, 2, 8 and 32 KiB.
lat() { local n=$1; shift; s lat-$n 40 env "$@" $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x; }
# nt NAME TEST G [ENV...]: nccl-tests TEST at 2 ranks under MPS, 8 B - 64 KiB, -G G.
nt() { local n=$1 t=$2 g=$3; shift 3; s $n 40 env "$@" SIZES="-b 8 -e 64K -f 2" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath TESTS=$t THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh; }
# summaries: BenchmarkLatency by step and size (us/call), nccl-tests rows (size, time, #wrong).
summaries() {
  local f n
  for f in $W/lat-*/log.txt; do n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done | sort -k3 -k2
  for f in $W/*/nccl-tests/ldpath-n*-*.txt; do n=$(basename $(dirname $(dirname $f))); awk -v n=$n '/^ *[0-9]+ +[0-9]+ +(float|int8)/ {print "NT", n, $1, $6, $8, $9}' $f; done | sort -k3n -k2
}
