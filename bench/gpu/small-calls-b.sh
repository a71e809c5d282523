#!/usr/bin/env bash
# small-calls-b.sh — issue 25 items 3 and 4 on one H200 in ONE device call
# (about 4 minutes; every step bounded, results packed after each): the
# persistent executor (THESEUS_EXECUTOR=persistent) and specialised kernels
# (theseusc compile --specialize), each on and off in the same run.
#
#   (here)   bash bench/gpu/prepare.sh     # also builds .device/spec-context
#            (and .device/build_nccl_tests.sh with third_party/nccl-tests, as for run-all.sh)
#   (device, carry .device and third_party) bash bench/gpu/small-calls-b.sh
#
# Results: $OUT/small-calls-b.tgz (steps.txt summarises, summary.txt lists
# the figures). The four configurations of the timing steps:
#   launch      the default: a kernel launch per call, the generic kernel
#   persistent  THESEUS_EXECUTOR=persistent (the resident kernel takes the
#               LL schedules' launches; the ring's are kernel launches)
#   spec        .device/spec-context (the default context plus its LL
#               schedules with specialised kernels), launch mode
#   spec-off    the same context and bundles with THESEUS_SPECIALIZED=0
#               (the generic kernel on the same schedules)
# Success: every rc=0; PERSISTENT lines wrong=0 (and queued > 0); GRAPH
# lines wrong=0 in each mode; DIFFSPEC and DIFF "0 mismatched"; RESIDENT
# and PERSISTENT ... sms= lines say what the resident kernel occupies; the
# LAT and NCCL lines give 8 B and 32 KiB per configuration (goals: 8 B
# <= 5 us graph-replayed and <= 8 us eager through nccl-tests, 32 KiB <=
# 10 us graph-replayed); BW128M busbw about 300 GB/s in launch and
# persistent mode (no regression).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/small-calls-b.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL"
PACK=small-calls-b.tgz
SUMMARY="^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|PERSISTENT|RESIDENT|DIFF|DIFFSPEC|KERNEL|LAT|NCCL|BW128M)|^Benchmark|resident executor"
# shellcheck source=bench/gpu/steps.sh
source "$ROOT/bench/gpu/steps.sh"
trap pack EXIT
# Stream memory operations stall the hardware queue they are on until they
# complete; the most queues keeps a resident kernel's start from queuing
# behind another stream's wait (docs/executor-modes.md, "Rules").
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296 CUDA_DEVICE_MAX_CONNECTIONS=32
export NCCL_NVLS_ENABLE=0
T0=$(date +%s)
DEADLINE=${DEADLINE:-270}
# PARTS: which parts run (default all): tests (1-3), lat (4), nccl (5's 8 B and
# 32 KiB), bw (5's 128 MiB busbw).
PARTS=${PARTS:-tests lat nccl bw}
part() { [[ " $PARTS " == *" $1 "* ]]; }
C=$D/cuda.test
SPEC=$D/spec-context
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"
[ -d "$SPEC/schedules" ] || { echo "no $SPEC: run bash bench/gpu/prepare.sh first" >&2; exit 2; }
# nccl-tests, built in the background against our nccl.h (CPU only), as run-all.sh does.
if [ ! -x "$ROOT/build/nccl-tests/all_reduce_perf" ] && [ -f "$ROOT/third_party/nccl-tests/src/common.cu" ] && [ -f "$D/build_nccl_tests.sh" ]; then
  (cp "$D/build_nccl_tests.sh" "$ROOT/ncclabi/gpu/build_nccl_tests.sh" &&
    THESEUS_PREFIX=$D/prefix bash "$ROOT/ncclabi/gpu/build_nccl_tests.sh") >"$R/nccl-tests-build.txt" 2>&1 &
fi

# 1. What a resident block takes, and the persistent executor's behaviour:
#    1000 doublings over queued and launched schedules, two streams, a graph
#    (TestPersistent prints the SMs its kernels ran on); the graph and
#    runtime tests in persistent mode.
if part tests; then
step resident-module 60 "$C" -test.run 'TestKernelModules|TestResidentModule' -test.v
step persistent 90 env THESEUS_EXECUTOR=persistent "$C" -test.run 'TestPersistent$|TestGraphReplay$/threadlocal|TestRuntimeCollectives' -test.v
# 2. Specialised kernels: bit for bit against the host interpreter, then the
#    graph and runtime tests on the context whose LL schedules carry them.
step diff-spec 90 "$C" -test.run TestDifferentialSpecialized -diff.spec="$SPEC/schedules" -test.v
step spec-tests 60 "$C" -test.run 'TestGraphReplay$/threadlocal|TestRuntimeCollectives' -comms.context="$SPEC" -test.v
# 3. Launch mode, generic kernel: the same tests and a differential sample.
step launch-tests 60 "$C" -test.run 'TestGraphReplay$/threadlocal|TestRuntimeCollectives' -test.v
step diff-sample 60 "$C" -test.run 'TestDifferential/programs/(oneshot|direct)/.*/n2/' -diff.sample=21 -diff.corpus=/nonexistent
fi

# 4. Latency, 2 ranks as goroutines (BenchmarkLatency: eager and graph-replayed), the
#    four configurations interleaved.
lat() { # lat NAME "ENV=V ..." [TEST FLAGS...]
  local name=$1 envs=$2; shift 2
  # shellcheck disable=SC2086
  step "lat-$name" 30 env $envs "$C" -test.run xxx -test.bench 'Latency/(8B|32768B)/' -test.benchtime 2000x -test.v "$@"
  awk -v c="$name" '/^BenchmarkLatency\//{ for (i = 2; i <= NF; i++) if ($i == "us/call") printf "LAT %s %s %s us/call\n", c, $1, $(i-1) }' "$R/lat-$name.txt" | tee -a "$R/summary.txt"
}
if part lat; then
  lat launch "THESEUS_EXECUTOR=launch"
  lat persistent "THESEUS_EXECUTOR=persistent"
  lat spec "THESEUS_EXECUTOR=launch" -comms.context="$SPEC"
  lat spec-off "THESEUS_SPECIALIZED=0" -comms.context="$SPEC"
fi

# 5. nccl-tests all_reduce_perf, 2 ranks as processes under MPS (ncclabi/gpu/run_nccl_tests.sh),
#    8 B and 32 KiB, eager and -G 1, per configuration; then 128 MiB busbw in launch and
#    persistent mode.
wait # the nccl-tests build
export CUDA_MPS_PIPE_DIRECTORY=/tmp/theseus-mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/theseus-mps-log
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
nvidia-cuda-mps-control -d && log "MPS started"
export THESEUS_PREFIX=$D/prefix THESEUS_DEBUG=INFO THESEUS_DEBUG_SUBSYS=INIT,EXECUTOR
nccl() { # nccl NAME GRAPH SIZES ENV...
  local name=$1 graph=$2 sizes=$3; shift 3
  local out=$R/nccl/$name-G$graph
  mkdir -p "$out"
  step "nccl-$name-G$graph" 40 env "$@" RESULTS="$out" MODES=ldpath NRANKS=2 TESTS=all_reduce SIZES="$sizes" \
    ITERS="-n 2000 -w 200 -G $graph" bash "$ROOT/ncclabi/gpu/run_nccl_tests.sh"
  # size, out-of-place time (us), busbw; in-place time (us), busbw
  awk -v c="$name" -v g="$graph" '/^ *[0-9]+ +[0-9]+ +float/{ printf "NCCL %s G%s %s B: out-of-place %s us (busbw %s), in-place %s us (busbw %s)\n", c, g, $1, $6, $8, $10, $12 }' \
    "$out/nccl-tests/ldpath-n2-all_reduce.txt" 2>/dev/null | tee -a "$R/summary.txt"
}
if [ -x "$ROOT/build/nccl-tests/all_reduce_perf" ]; then
  for g in 0 1; do
    part nccl || break
    nccl launch "$g" "-b 8 -e 32K -f 4096" THESEUS_EXECUTOR=launch
    nccl persistent "$g" "-b 8 -e 32K -f 4096" THESEUS_EXECUTOR=persistent
    nccl spec "$g" "-b 8 -e 32K -f 4096" THESEUS_SELECTION_CONTEXT="$SPEC"
    nccl spec-off "$g" "-b 8 -e 32K -f 4096" THESEUS_SELECTION_CONTEXT="$SPEC" THESEUS_SPECIALIZED=0
  done
  for m in launch persistent; do
    part bw || break
    mkdir -p "$R/nccl/bw-$m"
    step "bw128m-$m" 40 env THESEUS_EXECUTOR=$m RESULTS="$R/nccl/bw-$m" MODES=ldpath NRANKS=2 TESTS=all_reduce SIZES="-b 128M -e 128M" \
      ITERS="-n 20 -w 5" bash "$ROOT/ncclabi/gpu/run_nccl_tests.sh"
    awk -v c="$m" '/^ *[0-9]+ +[0-9]+ +float/{ printf "BW128M %s: out-of-place busbw %s GB/s, in-place %s GB/s\n", c, $8, $12 }' \
      "$R/nccl/bw-$m/nccl-tests/ldpath-n2-all_reduce.txt" 2>/dev/null | tee -a "$R/summary.txt"
  done
else
  log "no nccl-tests build (third_party/nccl-tests and .device/build_nccl_tests.sh): nccl steps skipped"
fi
echo quit | nvidia-cuda-mps-control
grep -h "persistent executor\|resident" "$R"/nccl/*/nccl-tests/logs/* 2>/dev/null | sort | uniq -c | head -5 >"$R/nccl-resident-log.txt"
cat "$R/summary.txt" >>"$R/steps.txt" 2>/dev/null
log done
