#!/usr/bin/env bash
# Repro of the 16-rank corpus mismatch at 256 threads, latency capture fix, nccl-tests rerun.
set -u
R=$(mktemp -d); T=.device/cuda.test
export CUDA_CACHE_MAXSIZE=4294967296 NCCL_NVLS_ENABLE=0 GODEBUG=asyncpreemptoff=1
pack() { tar czf $OUT/r8.tgz -C $R .; }
trap pack EXIT
(cp .device/build_nccl_tests.sh ncclabi/gpu/build_nccl_tests.sh && THESEUS_PREFIX=$PWD/.device/prefix bash ncclabi/gpu/build_nccl_tests.sh > $R/nccl-build.txt 2>&1) &
P='TestDifferential/programs/corpus/mscclpp-public_amd_pipeline_amd_reduceScatter_half_split_k1_inst1.xml'
for cfg in "t256:-diff.threads=256" "t128:-diff.threads=128" "t256h0:-diff.threads=256 -diff.ptx=.device/h0" "t128h0:-diff.threads=128 -diff.ptx=.device/h0"; do
  n=${cfg%%:*}; a=${cfg#*:}
  timeout 60 $T -test.run "$P" -diff.corpus=.device/corpus -diff.sample=3 $a -diff.out=$R/$n.cases -test.v > $R/$n.txt 2>&1
  echo "$n rc=$? $(grep -c ': ok' $R/$n.cases) ok, $(grep -vc ': ok' $R/$n.cases) bad: $(grep -v ': ok' $R/$n.cases | head -2)"
done
timeout 100 $T -test.run 'TestDifferential/programs/(ring|direct|rhd)/(reducescatter|allreduce)/n8' -diff.threads=256 -diff.corpus=/nonexistent -diff.sample=21 -test.v > $R/gen256.txt 2>&1; echo "gen256 rc=$? $(grep ^DIFF $R/gen256.txt)"
timeout 60 $T -test.run TestLatency -lat -test.v > $R/latency.txt 2>&1; echo "latency rc=$?"; grep "^LAT\|FAIL" $R/latency.txt
timeout 60 $T -test.run TestGraphReplay -test.v > $R/graph.txt 2>&1; echo "graph rc=$?"; grep "^GRAPH" $R/graph.txt
pack
wait
export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY; nvidia-cuda-mps-control -d
tail -2 $R/nccl-build.txt
if [ -x build/nccl-tests/all_reduce_perf ]; then
  RESULTS=$R THESEUS_PREFIX=$PWD/.device/prefix SIZES="-b 8 -e 64M -f 8" ITERS="-n 10 -w 3" timeout 200 bash ncclabi/gpu/run_nccl_tests.sh > $R/nccl-tests.txt 2>&1; echo "nccl-tests rc=$?"
  grep "^| " $R/nccl-tests/summary.md | cut -c1-80
fi
echo quit | nvidia-cuda-mps-control
