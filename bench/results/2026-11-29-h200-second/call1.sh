#!/usr/bin/env bash
# diagnostic first call: what works on the GPU
set -u
O=$OUT; R=/tmp/r; mkdir -p $R
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 GODEBUG=asyncpreemptoff=1
( cp .device/build_nccl_tests.sh ncclabi/gpu/build_nccl_tests.sh; THESEUS_PREFIX=$PWD/.device/prefix bash ncclabi/gpu/build_nccl_tests.sh > $R/ncclbuild.txt 2>&1; echo "build rc=$?" >> $R/ncclbuild.txt; tar czf $O/nccltests.tgz build/nccl-tests ) &
nvidia-smi > $R/smi.txt 2>&1
s() { n=$1; t=$2; shift 2; echo "== $(date +%T) $n"; timeout $t "$@" > $R/$n.txt 2>&1; echo "rc=$?"; grep -E "^(--- FAIL|FAIL|ok|PASS)|mismatched|panic" $R/$n.txt | head -8; tail -3 $R/$n.txt; }
s driver 40 .device/driver.test -test.v
s diff 200 .device/cuda.test -test.run TestDifferential -test.v -diff.corpus=.device/corpus -diff.out=$R/diffcases.txt
s runtime 90 .device/cuda.test -test.run TestRuntimeCollectives -test.v
s bw 60 .device/cuda.test -test.run TestBandwidth -bw -test.v
s bench 60 .device/theseus-bench --backend cuda -e 1M
wait
cat $R/ncclbuild.txt | tail -4
grep -c " ok$" $R/diffcases.txt; grep -v " ok$" $R/diffcases.txt | head -5
tar czf $O/r.tgz -C /tmp r
