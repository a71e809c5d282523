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
# Latency variants of the kernel for bench/gpu/latency-variants.sh: LAT_VARIANTS
# "name:build flags" entries separated by ";" (flags a kernel source under
# test reads; the THESEUS_LAT_* set measured in bench/results/2026-12-01-h200-
# twelfth call G2a, none of which paid, is in the kernel of a459371 only:
# LAT_VARIANTS=default names it, for a checkout of that commit). Each variant is
# every datatype's module of the measurement build (the differential test uses
# them all), packed into .device/lat/<name>.tgz (about 1.5 MB; the script
# unpacks it on the GPU machine) with its flags in flags.txt. Also
# .device/lat/ctx-simple: the default context with the Simple all-pairs
# allreduce preferred up to 4 KiB and the ring above (the waits, signals and
# multi-block done words the LL schedule has none of). LAT_ONLY=1 builds only
# what latency-variants.sh needs (cuda.test, .device/lat, .device/corpus) and
# stops.
LAT_DEFAULT="acqrel:-DTHESEUS_LAT_ACQREL=1;done:-DTHESEUS_LAT_DONE=1;poll:-DTHESEUS_LAT_POLL=1;begin:-DTHESEUS_LAT_BEGIN=1;\
fence:-DTHESEUS_LAT_FENCE=1;stage:-DTHESEUS_LAT_STAGE=1;\
all:-DTHESEUS_LAT_ACQREL=1 -DTHESEUS_LAT_DONE=1 -DTHESEUS_LAT_POLL=1 -DTHESEUS_LAT_BEGIN=1 -DTHESEUS_LAT_FENCE=1 -DTHESEUS_LAT_STAGE=1"
LAT_VARIANTS=${LAT_VARIANTS:-}
[ "$LAT_VARIANTS" = default ] && LAT_VARIANTS=$LAT_DEFAULT
# build_variants WHAT LIST DIR DTYPES PACK: each "name:build flags" entry of
# LIST (separated by ";") built into DIR/name (THESEUS_PTX_DTYPES=DTYPES, ""
# for every datatype), its flags in flags.txt; with PACK=1 packed into
# DIR/name.tgz instead.
build_variants() {
  local what=$1 list=$2 dir=$3 dtypes=$4 pack=$5 v name flags entries
  IFS=';' read -ra entries <<<"${list//$'\n'/ }"
  for v in ${entries[@]+"${entries[@]}"}; do
    v=${v#"${v%%[![:space:]]*}"} # entries may start with blanks (or a new line)
    [ -n "$v" ] || continue
    name=${v%%:*} flags=${v#*:}
    if [ -z "$name" ] || [ "$name" = "$v" ] || [[ "$name" == */* ]]; then
      echo "prepare.sh: $what entry '$v' is not name:flags" >&2
      exit 2
    fi
    THESEUS_PTX_OUT="$dir/$name" THESEUS_PTX_DTYPES="$dtypes" THESEUS_KERNEL_FLAGS="$flags" bash cuda/kernel/build.sh bench
    echo "$flags" >"$dir/$name/flags.txt"
    if [ "$pack" = 1 ]; then
      tar czf "$dir/$name.tgz" -C "$dir/$name" .
      rm -rf "${dir:?}/$name"
    fi
    echo "$what $name: $flags"
  done
}
build_lat() {
  rm -rf "$D/lat"
  mkdir -p "$D/lat"
  build_variants LAT_VARIANTS "$LAT_VARIANTS" "$D/lat" "" 1
  local ctx=$D/lat/ctx-simple
  mkdir -p "$ctx"
  cp examples/contexts/default/*.jsonl "$ctx/"
  cat >>"$ctx/schedule_manifest.jsonl" <<'JSONL'
{"gen":"oneshot","collective":"allreduce","usable":"nranks > 1","preference":"msgsize <= 4096 ? 60 : 0","name":"allreduce_oneshot_simple_lat","comment":"bench/gpu/latency-variants.sh: Simple all-pairs (signals, waits, the pairing wait) up to 4 KiB"}
{"gen":"ring","channels":"clamp(64 / nranks, 1, 32)","collective":"allreduce","preference":"msgsize > 4096 ? 60 : 0","name":"allreduce_ring_lat","comment":"bench/gpu/latency-variants.sh: the ring (32 threadblocks at 2 ranks: multi-block done words) above 4 KiB"}
JSONL
  go run ./cmd/theseusc lint "$ctx" >/dev/null
}
if [ "${LAT_ONLY:-0}" = 1 ]; then
  [ -n "$LAT_VARIANTS" ] || LAT_VARIANTS=$LAT_DEFAULT
  go test -c -ldflags="-s -w" -o "$D/cuda.test" ./cuda
  build_lat
  rm -rf "$D/corpus"
  if [ -d ../shared/corpus ]; then cp -r ../shared/corpus "$D/corpus"; fi
  du -sh "$D/cuda.test" "$D/lat" "$D/corpus" 2>/dev/null
  exit 0
fi
# cuda.test and the prefix also serve ncclabi/gpu/run_p2p.sh (issue 22: the
# point-to-point engine's GPU tests, nccl-tests' p2p tests, PyTorch, figures).
go test -c -ldflags="-s -w" -o "$D/cuda.test" ./cuda
go test -c -ldflags="-s -w" -o "$D/driver.test" ./cuda/driver
go build -ldflags="-s -w" -o "$D/theseus-bench" ./cmd/theseus-bench
# The UCX transport's tests (bench/gpu/ucx-transport.sh; no GPU needed).
# bench/gpu/run-nodes.sh (simulated nodes on one GPU, issue 24) needs the
# prefix below and nccl-tests (the lead's .device/build_nccl_tests.sh and
# .device/build_nccl_baseline.sh, or binaries in .device/nccl-bin).
go test -c -ldflags="-s -w" -o "$D/ucx.test" ./runtime/transport/ucx
go test -c -ldflags="-s -w" -o "$D/proxy.test" ./runtime/transport/proxy
make -C ncclabi install-shared PREFIX="$D/prefix" >/dev/null
# The point-to-point engine's parameter sweep (ncclabi/gpu/run_p2p.sh step 5,
# P2P_CONTEXTS): the installed default context plus one "gen": "p2p" entry
# each (the entry also in p2p-entry.json, for the summary).
rm -rf "$D/p2p-contexts"
for v in ch32:'"channels":32' ch16-t1024:'"threads":1024' ch32-t1024:'"channels":32,"threads":1024'; do
  dir=$D/p2p-contexts/${v%%:*}
  mkdir -p "$dir"
  cp -r "$D/prefix/share/theseus/contexts/default/." "$dir/"
  entry='{"gen":"p2p","collective":"sendrecv",'"${v#*:}"',"preference":"100","name":"p2p-'"${v%%:*}"'"}'
  echo "$entry" >>"$dir/schedule_manifest.jsonl"
  echo "$entry" >"$dir/p2p-entry.json"
done
# The default context plus its LL schedules with specialised kernels
# (float32; bench/gpu/small-calls-b.sh, TestDifferentialSpecialized
# -diff.spec): theseusc compile --specialize runs clang-14 here.
go build -ldflags="-s -w" -o "$D/theseusc" ./cmd/theseusc
SPEC_DTYPES=${SPEC_DTYPES:-float32} THESEUSC="$D/theseusc" bash bench/gpu/make-spec-context.sh "$D/spec-context" >/dev/null
# Measurement builds of the kernel (cuda/kernel/bench.cu, `build.sh bench`;
# never embedded; docs/design/cuda.md, "Measurement builds"):
#   .device/bench/refs   the executor as embedded plus the reference copies
#                        (float32, bfloat16): BenchmarkBandwidth* -bw.refs
#   .device/bench/probe  with THESEUS_PROBE_TIMES=1 (float32): BenchmarkLatency
#                        -lat.probe, loaded through THESEUS_PTX_DIR
# and variants for BenchmarkBandwidth -bw.variants from BW_VARIANTS:
# "name:build flags" entries separated by ";", for example
#   BW_VARIANTS="u8:-DCOPY_UNROLL=8;t512:-DMAX_THREADS=512" bash bench/gpu/prepare.sh
# (the knobs: COPY_UNROLL, REDUCE_UNROLL, MAX_THREADS). Variants hold the
# float32 and bfloat16 modules (what the bandwidth benchmarks use);
# BW_VARIANT_DTYPES="" builds every datatype (for TestDifferential
# -diff.ptx). Each variant's flags go to its flags.txt, which
# BenchmarkBandwidth logs.
# OLD_PTX=<commit> also extracts that commit's embedded modules into
# .device/old-ptx (for bench/gpu/check-kernel.sh and small-messages.sh: the
# kernel before and after a change, in one run). small-messages.sh needs
# nothing else than the above (cuda.test, theseus-bench, the prefix) and,
# for nccl-tests, third_party/nccl-tests and .device/build_nccl_tests.sh.
rm -rf "$D/bw" "$D/bench" "$D/old-ptx"
THESEUS_PTX_OUT="$D/bench/refs" THESEUS_PTX_DTYPES="float32 bfloat16" bash cuda/kernel/build.sh bench
THESEUS_PTX_OUT="$D/bench/probe" THESEUS_PTX_DTYPES="float32" THESEUS_KERNEL_FLAGS="-DTHESEUS_PROBE_TIMES=1" bash cuda/kernel/build.sh bench
if [ -n "${OLD_PTX:-}" ]; then
  mkdir -p "$D/old-ptx"
  for f in $(git ls-tree --name-only "$OLD_PTX" cuda/kernel/ptx/); do
    git show "$OLD_PTX:$f" >"$D/old-ptx/$(basename "$f")"
  done
  echo "$OLD_PTX" >"$D/old-ptx/COMMIT"
fi
build_variants BW_VARIANTS "${BW_VARIANTS:-}" "$D/bw" "${BW_VARIANT_DTYPES-float32 bfloat16}" 0
[ -z "$LAT_VARIANTS" ] || build_lat
rm -rf "$D/corpus"
if [ -d ../shared/corpus ]; then cp -r ../shared/corpus "$D/corpus"; fi
du -sh "$D"
