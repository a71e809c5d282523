#!/usr/bin/env bash
# floor.sh — the floor of a 2-rank small call on one GPU (issue 25): builds
# bench/gpu/probes/floor.cu with nvcc on the GPU machine and times a launch
# that only meets the peer's launch through one flag each way, with the
# fence variants of the probe's header, as two streams of one process and
# as two processes under MPS (nccl-tests' setting). No Theseus code runs.
# About a minute. Output: $OUT/floor.txt, "FLOOR ..." lines.
#
#   (device) bash bench/gpu/floor.sh
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUTF=${OUT:-$ROOT/build}/floor.txt
mkdir -p "$(dirname "$OUTF")"
exec > >(tee "$OUTF") 2>&1
B=$(mktemp -d)
date -u
nvcc --version | tail -1
nvcc -O3 -arch=sm_90 -std=c++17 -o "$B/floor" "$ROOT/bench/gpu/probes/floor.cu" || exit 1
ITERS=${FLOOR_ITERS:-2000}
for v in empty vol rel sc acqrel two done; do
  timeout 60 "$B/floor" streams $v 1 256 "$ITERS"
done
timeout 60 "$B/floor" streams rel 16 256 "$ITERS"
timeout 60 "$B/floor" streams rel 1 512 "$ITERS"
# Two processes under MPS (started here unless one runs).
export CUDA_MPS_PIPE_DIRECTORY=${CUDA_MPS_PIPE_DIRECTORY:-/tmp/floor-mps-pipe} CUDA_MPS_LOG_DIRECTORY=${CUDA_MPS_LOG_DIRECTORY:-/tmp/floor-mps-log}
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
started=0
if ! echo get_server_list | nvidia-cuda-mps-control >/dev/null 2>&1; then
  nvidia-cuda-mps-control -d && started=1
fi
for v in empty vol rel sc acqrel two done; do
  timeout 60 "$B/floor" procs $v 1 256 "$ITERS"
done
timeout 60 "$B/floor" procs rel 16 256 "$ITERS"
[ "$started" = 1 ] && echo quit | nvidia-cuda-mps-control
rm -rf "$B"
