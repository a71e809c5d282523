#!/usr/bin/env bash
# Device call A (2026-12-02, fifteenth run; carry .device/f, third_party): the executor with its
# launch bound at 512 threads and small tables staged whole (b29212a) against the kernel before
# (12728ec, v/old) and each change alone (v/old512: the old source at 512; v/new1024: the new
# source at 1024), in one run:
#   1. ptxas -v (sm_90) of theseus_exec, old and new: registers and spills;
#   2. BenchmarkLatency, the four kernels interleaved twice; the probe timestamps old and new;
#   3. GPU tests: TestGraph, TestRuntimeCollectives, TestResidentModule, TestPersistent, a
#      differential sample;
#   4. nccl-tests 2 ranks under MPS: all_reduce 8 B - 64 KiB eager and -G 1 (new), eager (old
#      kernel); sendrecv 8 B - 64 KiB eager and -G 1; all_reduce 128 MiB busbw, new and old.
CALL=rA
DEADLINE=${DEADLINE:-560}
source bench/results/2026-12-02-h200-fifteenth/repro/common.sh
build_nccl_tests
mkdir -p $W/ptxas
for v in old new; do
  p=$D/v/old/theseus_float32.ptx; [ $v = new ] && p=cuda/kernel/ptx/theseus_float32.ptx
  (/usr/local/cuda/bin/ptxas -arch=sm_90 -v $p -o /dev/null > $W/ptxas/$v.txt 2>&1) &
done
for k in 1 2; do
  lat new-$k
  lat old-$k THESEUS_PTX_DIR=$D/v/old
  lat old512-$k THESEUS_PTX_DIR=$D/v/old512
  lat new1024-$k THESEUS_PTX_DIR=$D/v/new1024
done
for v in probe oldprobe; do s lat-$v 40 env THESEUS_PTX_DIR=$D/v/$v $D/cuda.test -test.run xxx -test.bench 'Latency/8B/eager$' -test.benchtime 1000x -lat.probe; done
s gputests 150 $D/cuda.test -test.run 'TestGraph|TestRuntimeCollectives|TestResidentModule|TestPersistent' -test.v
s diff 90 $D/cuda.test -test.run 'TestDifferential/programs/(oneshot|direct|twoshot|ring)/' -diff.sample=41 -diff.corpus=/nonexistent -test.v
wait
for v in old new; do echo "PTXAS $v: $(grep -A1 "Compiling entry function 'theseus_exec'" $W/ptxas/$v.txt | tail -1) $(grep -A3 "Compiling entry function 'theseus_exec'" $W/ptxas/$v.txt | grep -o 'Used [0-9]* registers')"; done
wait_nccl_tests
nt nt-ar-g0 all_reduce 0
nt nt-ar-g1 all_reduce 1
nt nt-ar-old-g0 all_reduce 0 THESEUS_PTX_DIR=$D/v/old
nt nt-sr-g0 sendrecv 0
nt nt-sr-g1 sendrecv 1
s nt-128m 40 env SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce bash ncclabi/gpu/run_nccl_tests.sh
s nt-128m-old 40 env THESEUS_PTX_DIR=$D/v/old SIZES="-b 128M -e 128M" ITERS="-n 20 -w 5" NRANKS=2 MODES=ldpath TESTS=all_reduce bash ncclabi/gpu/run_nccl_tests.sh
summaries
grep -h "probe[0-9]*-ns" $W/lat-probe/log.txt $W/lat-oldprobe/log.txt | head -4
echo "== +$(( $(date +%s) - T0 ))s done"
pack
