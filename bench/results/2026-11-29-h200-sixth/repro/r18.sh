#!/usr/bin/env bash
# Device call 18 (2026-11-29, sixth run): few-thread shared work (copies and reduces) against the interpreter, and under racecheck.
set -uo pipefail
D=$PWD/.device; R=$OUT/r18; mkdir -p $R
{ date -u +%FT%TZ; cat $D/COMMIT; echo "cuda.test rebuilt with the fixed test (working tree)"; } > $R/machine.txt
timeout 60 $D/cuda.test -test.run 'TestSharedUnitsFewThreadsGPU' -test.v > $R/fewthreads.txt 2>&1; echo "rc=$?"; grep -E "^\s*---|^ok|FAIL" $R/fewthreads.txt
timeout 60 compute-sanitizer --tool racecheck $D/cuda.test -test.run 'TestSharedUnitsFewThreadsGPU' > $R/racecheck-few.txt 2>&1; echo "rc=$?"; grep -E "FAIL|^ok|PASS|SUMMARY" $R/racecheck-few.txt | head
