#!/usr/bin/env bash
# Device call 7 of 2026-11-29 (fifth run): the final record at 3d0e7ad.
DEADLINE=560 bash bench/gpu/run-all.sh kernel 2>&1 | tail -100
timeout 40 .device/cuda.test -test.run TestBandwidthSharing -bw.sharing -bw.tile=1048576 -bw.align=0,256 -test.v > $OUT/sharing.txt 2>&1
