#!/usr/bin/env bash
# build_nccl_tests.sh — builds NVIDIA's nccl-tests against Theseus's nccl.h
# and libtheseus_nccl.so, one process per rank.
#
#   ncclabi/gpu/build_nccl_tests.sh
#
# Source: third_party/nccl-tests (a git-ignored checkout the lead provides;
# NCCL_TESTS_SRC overrides). Output: build/nccl-tests (NCCL_TESTS_BUILD).
# MPI: MPI_HOME when set (mpicc's installation), else ncclabi/gpu/minimpi,
# the few MPI calls nccl-tests makes, for processes of one host
# (launched by minimpirun.sh). CUDA: CUDA_HOME (default /usr/local/cuda);
# GPU code for sm_90 only (NVCC_GENCODE overrides).
source "$(dirname "$0")/common.sh"
need_prefix
SRC=${NCCL_TESTS_SRC:-$ROOT/third_party/nccl-tests}
BUILD=${NCCL_TESTS_BUILD:-$ROOT/build/nccl-tests}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
GENCODE=${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}
if [ ! -f "$SRC/src/common.cu" ]; then
  echo "no nccl-tests source at $SRC (provide a checkout of github.com/NVIDIA/nccl-tests)" >&2
  exit 2
fi
mkdir -p "$BUILD"
if [ -z "${MPI_HOME:-}" ]; then
  MPI_HOME=$BUILD/minimpi
  mkdir -p "$MPI_HOME/include" "$MPI_HOME/lib"
  cp "$ROOT/ncclabi/gpu/minimpi/mpi.h" "$MPI_HOME/include/"
  cc -O2 -fPIC -shared -o "$MPI_HOME/lib/libmpi.so" "$ROOT/ncclabi/gpu/minimpi/minimpi.c"
  echo "MPI: minimpi ($MPI_HOME)"
fi
echo "nccl-tests $(git -C "$SRC" rev-parse --short HEAD 2>/dev/null || echo '?') against $PREFIX/include/nccl.h (NCCL_VERSION_CODE $(grep -m1 'define NCCL_VERSION_CODE' "$PREFIX/include/nccl.h" | awk '{print $3}'))"
make -C "$SRC/src" build BUILDDIR="$BUILD" NCCL_HOME="$PREFIX" CUDA_HOME="$CUDA_HOME" MPI=1 MPI_HOME="$MPI_HOME" \
  NVCC_GENCODE="$GENCODE" -j"$(nproc)"
for t in all_reduce all_gather reduce_scatter broadcast reduce alltoall; do
  bin=$BUILD/${t}_perf
  [ -x "$bin" ] || { echo "missing $bin" >&2; exit 1; }
  echo "$bin: $(readelf -d "$bin" | grep -E 'NEEDED.*(nccl|mpi)' | tr -s ' ' | cut -d' ' -f6 | tr '\n' ' ')"
done
