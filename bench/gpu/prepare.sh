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
# The UCX transport's tests (bench/gpu/ucx-transport.sh; no GPU needed).
go test -c -ldflags="-s -w" -o "$D/ucx.test" ./runtime/transport/ucx
go test -c -ldflags="-s -w" -o "$D/proxy.test" ./runtime/transport/proxy
make -C ncclabi install-shared PREFIX="$D/prefix" >/dev/null
# Kernel variants for TestBandwidth -bw.variants (never embedded), from
# BW_VARIANTS: "name:build flags" entries separated by ";", for example
#   BW_VARIANTS="u8:-DCOPY_UNROLL=8;t512:-DMAX_THREADS=512" bash bench/gpu/prepare.sh
#   BW_VARIANTS="hints:-DTHESEUS_LD_HINTS=1 -Xclang -target-feature -Xclang +ptx74" ...
#   BW_VARIANTS="bulk:-DTHESEUS_BULK_COPY=1" ...   (an sm_90 module: build.sh
#     raises its header; TestBandwidth skips it on older GPUs)
# docs/design/cuda.md, "Copy bandwidth variants", lists the knobs.
# Variants hold the float32 and bfloat16 modules (what TestBandwidth uses);
# BW_VARIANT_DTYPES="" builds every datatype (for TestDifferential -diff.ptx).
# Each variant's flags go to its flags.txt, which TestBandwidth prints.
rm -rf "$D/bw"
BW_VARIANTS=${BW_VARIANTS:-}
IFS=';' read -ra variants <<<"${BW_VARIANTS//$'\n'/ }"
for v in ${variants[@]+"${variants[@]}"}; do
  v=${v#"${v%%[![:space:]]*}"} # entries may start with blanks (or a new line)
  [ -n "$v" ] || continue
  name=${v%%:*} flags=${v#*:}
  if [ -z "$name" ] || [ "$name" = "$v" ] || [[ "$name" == */* ]]; then
    echo "prepare.sh: BW_VARIANTS entry '$v' is not name:flags" >&2
    exit 2
  fi
  THESEUS_PTX_OUT="$D/bw/$name" THESEUS_PTX_DTYPES="${BW_VARIANT_DTYPES-float32 bfloat16}" THESEUS_KERNEL_FLAGS="$flags" bash cuda/kernel/build.sh
  echo "$flags" >"$D/bw/$name/flags.txt"
  mods=("$D/bw/$name"/theseus_*.ptx)
  echo "bw variant $name: $(grep -m1 '^\.target' "${mods[0]}")"
done
rm -rf "$D/corpus"
if [ -d ../shared/corpus ]; then cp -r ../shared/corpus "$D/corpus"; fi
du -sh "$D"
