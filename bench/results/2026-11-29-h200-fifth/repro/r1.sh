#!/usr/bin/env bash
# Device call 1 of 2026-11-29 (fifth run), at 3afd4e4. On the development machine:
#   BW_VARIANTS="refs:-DTHESEUS_BW_REFS=1 -Xclang -target-feature -Xclang +ptx74;pipe:-DCOPY_LOOP=2;u8:-DCOPY_UNROLL=8;pipe8t512:-DCOPY_LOOP=2 -DCOPY_UNROLL=8 -DMAX_THREADS=512" bash bench/gpu/prepare.sh
# On the device:
bash bench/gpu/run-all.sh kernel
