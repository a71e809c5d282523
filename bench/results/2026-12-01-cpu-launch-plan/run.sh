#!/bin/bash
# interleaved before/after CPU benchmarks
B=/tmp/i21-before; A=/work/wt/i21
out=/tmp/i21-bench/final
rm -f $out/*.txt
for i in 1 2 3 4 5 6 7 8; do
  for w in before after; do
    if [ $w = before ]; then R=$B; T=$B/bin; else R=$A; T=/tmp/i21-after/bin; fi
    (cd $R/runtime/theseus && $T/theseus.test -test.run '^$' -test.bench 'CallHostCPU/(default|registered)$|CallHit$' -test.count 1) >> $out/theseus-$w.txt 2>&1
    (cd $R/runtime/executor && $T/executor.test -test.run '^$' -test.bench 'ExecuteHit|PlanLaunch' -test.count 1) >> $out/executor-$w.txt 2>&1
    (cd $R/ncclabi/internal/engine && $T/engine.test -test.run '^$' -test.bench 'CallPath/(theseus|abi)/allreduce/(same|cycle)$' -test.benchtime 5000x -test.count 1) >> $out/engine-$w.txt 2>&1
  done
done
for i in 1 2; do
  for w in before after; do
    if [ $w = before ]; then R=$B; T=$B/bin; else R=$A; T=/tmp/i21-after/bin; fi
    (cd $R/ncclabi/capitest && $T/capitest.test -test.run '^$' -test.bench 'CAPICall/allreduce/(same|cycle)$' -test.benchtime 5000x -test.count 3) >> $out/capi-$w.txt 2>&1
  done
done
echo finished > $out/DONE
