#!/usr/bin/env bash
# Builds measurement variants of the point-to-point kernel (issue 22: where an 8 B sendrecv's
# 15 us go) into .device/v/<name>, each a THESEUS_PTX_DIR of the uint8 and float32 modules
# (cuda/kernel/build.sh bench over a patched copy of cuda/kernel; the product is unchanged):
#   base     the kernel as it is
#   nofence  p2p.cuh without its fence.sc.sys (fence_sys) calls: the release stores and
#            acquire loads alone
#   nopost   p2p_post_next does nothing (a receive posts nothing: no zero-copy)
#   empty    theseus_p2p returns at once (timing only: the data is wrong)
set -euo pipefail
ROOT=$(git rev-parse --show-toplevel)
for v in base nofence nopost empty; do
  T=$(mktemp -d); cp -r $ROOT/cuda/kernel $T/
  P=$T/kernel/p2p.cuh
  case $v in
  nofence) sed -i 's/^\( *\)fence_sys();/\1;/' $P ;;
  nopost) sed -i '/^DEV void p2p_post_next(/,/^}/ s/^  const theseus_p2p_xfer\* xs = \(.*\)$/  return;\n  const theseus_p2p_xfer* xs = \1/' $P ;;
  empty) sed -i 's/^extern "C" __global__ void __launch_bounds__(THESEUS_P2P_MAX_THREADS) theseus_p2p(theseus_launch launch) {/&\n  if (launch.rank >= 0) return;/' $P ;;
  esac
  [ $v = base ] || ! diff -q $ROOT/cuda/kernel/p2p.cuh $P >/dev/null || { echo "$v: the patch changed nothing" >&2; exit 1; }
  THESEUS_PTX_OUT=$ROOT/.device/v/$v THESEUS_PTX_DTYPES="uint8 float32" bash $T/kernel/build.sh bench
  rm -rf $T
  echo "$v: $(ls $ROOT/.device/v/$v)"
done
