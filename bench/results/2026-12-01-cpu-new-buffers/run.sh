#!/bin/bash
# Interleaved before/after CPU benchmarks of issue 25 items 1-2 (the trace's
# flag test on the call path, L3 rebases of new buffers). Before: main at the
# branch point (7c1bf01) with this branch's runtime/theseus/callhost_test.go
# (for BenchmarkCallHostCPU/shift) in /tmp/i25a-before; after: this branch.
# Test binaries: go test -c of runtime/theseus, runtime/executor,
# ncclabi/internal/engine, ncclabi/capitest in each tree.
B=/tmp/i25a-before; A=/work/wt/i25a
out=${OUT:-/tmp/i25a-bench}
mkdir -p $out; rm -f $out/*.txt
for i in 1 2 3 4 5 6; do
  for w in before after; do
    if [ $w = before ]; then R=$B; T=$B; else R=$A; T=/tmp/i25a-after; fi
    (cd $R/runtime/theseus && $T/theseus.test -test.run '^$' -test.bench 'CallHostCPU/(default|registered|shift)$|CallHit$' -test.benchtime 20000x -test.count 1) >> $out/theseus-$w.txt 2>&1
    (cd $R/runtime/executor && $T/executor.test -test.run '^$' -test.bench 'ExecuteHit|PlanLaunch' -test.count 1) >> $out/executor-$w.txt 2>&1
    (cd $R/ncclabi/internal/engine && $T/engine.test -test.run '^$' -test.bench 'CallPath/(theseus|abi)/allreduce/(same|cycle|shift)$' -test.benchtime 5000x -test.count 1) >> $out/engine-$w.txt 2>&1
  done
done
for i in 1 2; do
  for w in before after; do
    if [ $w = before ]; then R=$B; T=$B; else R=$A; T=/tmp/i25a-after; fi
    (cd $R/ncclabi/capitest && $T/capitest.test -test.run '^$' -test.bench 'CAPICall/allreduce/(same|cycle|shift)$' -test.benchtime 5000x -test.count 3) >> $out/capi-$w.txt 2>&1
  done
done
echo finished > $out/DONE
