#!/usr/bin/env bash
# prepare.sh — on the development machine (Go, no GPU): builds everything
# bench/gpu/run-all.sh runs on the GPU machine into .device/ (git-ignored,
# carried with the device tool's `carry: [".device"]`).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
mkdir -p "$D"
cd "$ROOT"
git rev-parse HEAD >"$D/COMMIT"
go test -c -ldflags="-s -w" -o "$D/cuda.test" ./cuda
go test -c -ldflags="-s -w" -o "$D/driver.test" ./cuda/driver
go build -ldflags="-s -w" -o "$D/theseus-bench" ./cmd/theseus-bench
make -C ncclabi install-shared PREFIX="$D/prefix" >/dev/null
# Kernel variants for TestBandwidth -bw.variants (never embedded), from
# BW_VARIANTS: "name:build flags" entries separated by ";", for example
#   BW_VARIANTS="u8:-DCOPY_UNROLL=8;t512:-DMAX_THREADS=512" bash bench/gpu/prepare.sh
#   BW_VARIANTS="hints:-DTHESEUS_LD_HINTS=1 -Xclang -target-feature -Xclang +ptx74" ...
# Variants hold the float32 and bfloat16 modules (what TestBandwidth uses);
# BW_VARIANT_DTYPES="" builds every datatype (for TestDifferential -diff.ptx).
rm -rf "$D/bw"
IFS=';' read -ra variants <<<"${BW_VARIANTS:-}"
for v in ${variants[@]+"${variants[@]}"}; do
  THESEUS_PTX_OUT="$D/bw/${v%%:*}" THESEUS_PTX_DTYPES="${BW_VARIANT_DTYPES-float32 bfloat16}" THESEUS_KERNEL_FLAGS="${v#*:}" bash cuda/kernel/build.sh
done
rm -rf "$D/corpus"
if [ -d ../shared/corpus ]; then cp -r ../shared/corpus "$D/corpus"; fi
du -sh "$D"
