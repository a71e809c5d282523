# Sourced by this run's call scripts after CALL is set: unpacks the call's build
# (.device/f/dev.txz: COMMIT, cuda.test, the NCCL prefix) and nccl-tests 2.19.6 built here
# before (.device/f/nccl-bin.txz: against Theseus's nccl.h, and against NCCL 2.28), sources the
# eleventh run's step runner (s, pack, D, W, T0) and gives shared steps.
tar xJf .device/f/dev.txz -C .device
mkdir -p .device/nccl-bin && tar xJf .device/f/nccl-bin.txz -C .device/nccl-bin
source bench/results/2026-12-01-h200-eleventh/repro/final-common.sh
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
export NCCL_TESTS_BUILD=$D/nccl-bin/nccl-tests
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
LB='Latency/(8|2048|8192|32768)B/(eager|graph)$'
# lat NAME [ENV...]: BenchmarkLatency (2 ranks as goroutines) at 8 B, 2, 8 and 32 KiB.
lat() { local n=$1; shift; s lat-$n 40 env "$@" $D/cuda.test -test.run xxx -test.bench "$LB" -test.benchtime 1000x; }
# nt NAME TEST G SIZES [ENV...]: nccl-tests TEST at 2 ranks under MPS, -G G.
nt() { local n=$1 t=$2 g=$3 z=$4; shift 4; s $n 40 env "$@" SIZES="$z" ITERS="-n 50 -w 10 -G $g" NRANKS=2 MODES=ldpath TESTS=$t THESEUS_DEBUG_SUBSYS=INIT bash ncclabi/gpu/run_nccl_tests.sh; }
# p2pctx NAME FIELDS: the default context with one more point-to-point entry (docs/p2p.md,
# "Parameters"), in $W/ctx-NAME.
p2pctx() {
  rm -rf $W/ctx-$1; cp -r $ROOT/examples/contexts/default $W/ctx-$1
  echo "{\"gen\":\"p2p\",\"collective\":\"sendrecv\",$2,\"preference\":\"10\",\"name\":\"$1\"}" >> $W/ctx-$1/schedule_manifest.jsonl
}
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
# summaries: BenchmarkLatency by step and size (us/call), nccl-tests rows (size, time, #wrong).
summaries() {
  local f n
  for f in $W/lat-*/log.txt; do n=$(basename $(dirname $f)); awk -v n=$n '/^BenchmarkLatency\//{for(i=2;i<=NF;i++) if($i=="us/call") print "LAT", n, $1, $(i-1)}' $f; done | sort -k3 -k2
  for f in $W/*/nccl-tests/ldpath-n*-*.txt; do n=$(basename $(dirname $(dirname $f))); awk -v n=$n '/^ *[0-9]+ +[0-9]+ +(float|int8)/ {print "NT", n, $1, $6, $8, $9}' $f; done | sort -k3n -k2
}
