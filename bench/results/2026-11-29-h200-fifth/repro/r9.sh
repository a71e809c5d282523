#!/usr/bin/env bash
# Device call 9 of 2026-11-29 (fifth run), at 941ef32 (prepare.sh with BW_VARIANTS="refs:-DTHESEUS_BW_REFS=1
# -Xclang -target-feature -Xclang +ptx74"): Nsight Compute, full set with per-SASS source counters, of the
# executor's shared-work copy (1 MiB units, 264 x 512, chunks on 256-byte boundaries) and of the
# dynamic reference copy theseus_ref_dyn at the same grid, for offline comparison.
set -uo pipefail
D=$PWD/.device; R=$OUT/r9; mkdir -p $R
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $R/machine.txt
# TestBandwidthSharing with -bw.tile=1048576 -bw.align=256: 4 shapes without shared work (53 launches each:
# 3 warm + 50 timed), then 132x512, 132x1024, 264x512 with it: skip 212 + 106 + 3.
timeout 150 ncu --set full --import-source no --kernel-name theseus_exec --launch-skip 321 --launch-count 1 --kill yes -o $R/exec \
  $D/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=1048576 -bw.align=256 > $R/ncu-exec.log 2>&1; echo "exec rc=$?"
# TestBandwidth -bw.variants=refs: the refs variant's reference copies run at their grids (53 launches each);
# theseus_ref_dyn's second grid is 264x512: skip 53 + 3.
timeout 150 ncu --set full --kernel-name theseus_ref_dyn --launch-skip 56 --launch-count 1 --kill yes -o $R/dyn \
  $D/cuda.test -test.run 'TestBandwidth$' -bw -bw.variants=$D/bw/refs > $R/ncu-dyn.log 2>&1; echo "dyn rc=$?"
for k in exec dyn; do
  [ -f $R/$k.ncu-rep ] || continue
  ncu -i $R/$k.ncu-rep --page details > $R/$k-details.txt 2>&1
  ncu -i $R/$k.ncu-rep --page source --csv --print-source sass > $R/$k-sass.csv 2>&1
done
rm -f $R/*.ncu-rep
