#!/usr/bin/env bash
# latency-variants.sh — issue 25: the kernel's synchronisation variants
# (build flags of the kernel; the THESEUS_LAT_* set of a459371 in docs/design/cuda.md, "Small
# launches", "Synchronisation variants") against the embedded kernel on ONE
# H200, in one device call of at most 4 minutes (every step bounded, the
# results packed after each).
#
#   (here)   LAT_ONLY=1 bash bench/gpu/prepare.sh
#            (.device/cuda.test, .device/lat/<variant>.tgz, .device/lat/ctx-simple,
#            .device/corpus; or LAT_VARIANTS=default with the whole prepare.sh)
#   (device, carry .device) bash bench/gpu/latency-variants.sh
#
# Results: $OUT/latency-variants.tgz; steps.txt summarises, summary.txt holds
# the figures (LAT and LATSUM lines) and the checks (GRAPH, DIFF lines).
#   1. jit: every variant's modules JIT-compiled into the driver's cache,
#      several processes at once, before anything is timed (KERNEL lines).
#   2. BenchmarkLatency, 2 ranks on the GPU, 8 B, 2 KiB and 32 KiB, eager and
#      graph-replayed (us/call; graph is GPU time per call): the embedded
#      kernel ("embedded") and every variant interleaved, ROUNDS rounds on the
#      default context (the LL all-pairs schedule: one threadblock, no
#      semaphores), then one round on .device/lat/ctx-simple ("simple": the
#      Simple all-pairs allreduce up to 4 KiB, signals, waits and the pairing
#      wait; the 32-threadblock ring at 32 KiB, multi-block done words).
#      LAT <context> <build> <size>/<mode> <us>; LATSUM <context>
#      <size>/<mode> <build> <mean us> <difference from embedded>.
#   3. checks, per variant (THESEUS_PTX_DIR): TestGraph (captures, 1000
#      replays, discarded graphs: GRAPH ... wrong=0) and a differential sample
#      (generators at 1 and 2 ranks: DIFF ... 0 mismatched), and for all,
#      acqrel and poll the corpus's schedules too (foreign schedules: the
#      barrier and dependency ops).
# Success: every rc=0, GRAPH wrong=0, DIFF "0 mismatched" for each variant; a
# variant pays where its LATSUM difference is below the spread between the
# two rounds of the embedded kernel (LAT lines). PARTS (default "jit lat
# simple check") and ROUNDS (2) choose what runs; DEADLINE (230 s) bounds it.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device
R=$(mktemp -d /tmp/latency-variants.XXXXXX)
FINAL=${OUT:-$ROOT/build}
mkdir -p "$FINAL"
PACK=latency-variants.tgz
SUMMARY="^(--- FAIL|FAIL|ok|PASS)|mismatched|panic|^(GRAPH|DIFF|LAT) |rc=[1-9]"
# shellcheck source=bench/gpu/steps.sh
source "$ROOT/bench/gpu/steps.sh"
trap pack EXIT
export GODEBUG=asyncpreemptoff=1 CUDA_CACHE_MAXSIZE=4294967296
T0=$(date +%s)
DEADLINE=${DEADLINE:-230}
PARTS=${PARTS:-jit lat simple check}
ROUNDS=${ROUNDS:-2}
part() { [[ " $PARTS " == *" $1 "* ]]; }
C=$D/cuda.test
P=$(mktemp -d /tmp/latency-variants-ptx.XXXXXX)  # the unpacked variants (not packed into the results)
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(cat "$D/COMMIT" 2>/dev/null || echo '?')"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
} >"$R/machine.txt" 2>&1
cat "$R/machine.txt"
[ -x "$C" ] || { echo "no $C: run LAT_ONLY=1 bash bench/gpu/prepare.sh first" >&2; exit 2; }
# The variants, "all" first (it is checked first).
V=()
for t in "$D"/lat/all.tgz "$D"/lat/*.tgz; do
  [ -f "$t" ] || continue
  v=$(basename "$t" .tgz)
  [ -d "$P/$v" ] && continue
  mkdir -p "$P/$v" && tar xzf "$t" -C "$P/$v" && V+=("$v")
  echo "$v: $(cat "$P/$v/flags.txt")" | tee -a "$R/variants.txt"
done
[ "${#V[@]}" -gt 0 ] || { echo "no $D/lat/*.tgz: run LAT_ONLY=1 bash bench/gpu/prepare.sh first" >&2; exit 2; }
SIMPLE=$D/lat/ctx-simple
CORPUS=$D/corpus

# 1. The JIT of every variant's modules, three processes per variant (the two
#    fp8 modules take 10-15 s each, the other ten 2-3 s each), 16 at once.
if part jit; then
  mkdir -p "$R/jit"
  for v in "${V[@]}"; do
    for g in fp8e5m2 fp8e4m3 'int8|uint8|int32|uint32|int64|uint64|float16|float32|float64|bfloat16'; do
      echo "$v ${g%%|*}"
    done
  done >"$R/jit/list"
  cat >"$R/jit/one.sh" <<'EOF'
# one.sh VARIANT GROUP: the JIT of one variant's modules of GROUP (P, C, R from the caller).
v=$1 n=$2
case $n in fp8e5m2 | fp8e4m3) g=$n ;; *) g='int8|uint8|int32|uint32|int64|uint64|float16|float32|float64|bfloat16' ;; esac
THESEUS_PTX_DIR="$P/$v" "$C" -test.run "TestModuleLoadPTXDir\$/^($g)\$" -test.v >"$R/jit/$v-$n.txt" 2>&1
echo "JIT $v $n rc=$?"
EOF
  step jit 75 env P="$P" C="$C" R="$R" bash -c "xargs -P 16 -n 2 bash '$R/jit/one.sh' <'$R/jit/list'"
  grep -h "^KERNEL" "$R"/jit/*.txt | sort >"$R/jit-kernels.txt"
  grep "^JIT" "$R/jit.txt" | grep -v "rc=0" | head -5 | sed 's/^/   /' | tee -a "$R/steps.txt"
  echo "   modules compiled: $(grep -c "^KERNEL" "$R/jit-kernels.txt") of $((12 * ${#V[@]}))" | tee -a "$R/steps.txt"
fi

# 2. Latency. lat CONTEXT BUILD [TEST FLAGS...]: one BenchmarkLatency run of the
#    embedded kernel (BUILD embedded) or a variant.
lat() {
  local ctx=$1 b=$2
  shift 2
  local envs=()
  [ "$b" = embedded ] || envs=("THESEUS_PTX_DIR=$P/$b")
  local k=$((${#LATN[@]} + 1))
  LATN+=("$k")
  step "lat-$ctx-$b-$k" 25 env ${envs[@]+"${envs[@]}"} "$C" -test.run xxx -test.bench 'Latency/(8B|2048B|32768B)/(eager|graph)$' \
    -test.benchtime 1000x "$@"
  awk -v c="$ctx" -v b="$b" '/^BenchmarkLatency\//{ for (i = 2; i <= NF; i++) if ($i == "us/call") { n = $1; sub(/^BenchmarkLatency\//, "", n); sub(/-[0-9]+$/, "", n); printf "LAT %s %s %s %s\n", c, b, n, $(i-1) } }' \
    "$R/lat-$ctx-$b-$k.txt" | tee -a "$R/summary.txt"
}
LATN=()
rev() { local i; for ((i = ${#V[@]} - 1; i >= 0; i--)); do echo "${V[i]}"; done; }
for k in $(seq 1 "$ROUNDS"); do
  part lat || break
  if [ $((k % 2)) = 1 ]; then order=(embedded "${V[@]}"); else mapfile -t order < <(rev); order+=(embedded); fi
  for b in "${order[@]}"; do lat ll "$b"; done
  # After the first round: the combined variant's checks, so that they are in
  # even if the call's time runs out later.
  if [ "$k" = 1 ] && part check && [ -d "$P/all" ]; then
    step graph-all 40 env THESEUS_PTX_DIR="$P/all" "$C" -test.run TestGraph -test.v
    step diff-all 45 env THESEUS_PTX_DIR="$P/all" "$C" -test.run 'TestDifferential/programs/(ring|direct|oneshot|twoshot|bw)/.*/n[12]$' \
      -diff.sample=41 -diff.corpus=/nonexistent -test.v
    if [ -d "$CORPUS" ]; then
      step diff-corpus-all 45 env THESEUS_PTX_DIR="$P/all" "$C" -test.run 'TestDifferential/programs/corpus/' -diff.sample=41 \
        -diff.corpus="$CORPUS" -test.v
    fi
  fi
done
if part simple && [ -d "$SIMPLE" ]; then
  for b in embedded "${V[@]}"; do lat simple "$b" -comms.context="$SIMPLE"; done
fi
# Means per context, size/mode and build, and the difference from embedded.
awk '$1 == "LAT" { k = $2 " " $4; s[k, $3] += $5; n[k, $3]++; keys[k] = 1; builds[$3] = 1 }
  END { for (k in keys) for (b in builds) if (n[k, b] > 0) {
    m = s[k, b] / n[k, b]; e = n[k, "embedded"] > 0 ? s[k, "embedded"] / n[k, "embedded"] : 0
    split(k, kk, " "); printf "LATSUM %s %s %s %.2f %+.2f\n", kk[1], kk[2], b, m, e > 0 ? m - e : 0 } }' \
  "$R/summary.txt" 2>/dev/null | sort -k2,3 -k5n >"$R/latsum.txt"
sed 's/^/   /' "$R/latsum.txt" | tee -a "$R/steps.txt"
cat "$R/latsum.txt" >>"$R/summary.txt"
pack

# 3. Checks of the other variants: graphs, a differential sample, and the
#    corpus for the variants that change barrier and dependency waits.
for v in "${V[@]}"; do
  part check || break
  [ "$v" = all ] && continue
  step "graph-$v" 40 env THESEUS_PTX_DIR="$P/$v" "$C" -test.run TestGraph -test.v
  step "diff-$v" 45 env THESEUS_PTX_DIR="$P/$v" "$C" -test.run 'TestDifferential/programs/(ring|direct|oneshot|twoshot|bw)/.*/n[12]$' \
    -diff.sample=41 -diff.corpus=/nonexistent -test.v
done
for v in acqrel poll; do
  part check && [ -d "$P/$v" ] && [ -d "$CORPUS" ] || continue
  step "diff-corpus-$v" 45 env THESEUS_PTX_DIR="$P/$v" "$C" -test.run 'TestDifferential/programs/corpus/' -diff.sample=41 \
    -diff.corpus="$CORPUS" -test.v
done
# CHECK <step> <its GRAPH or DIFF line>, and the steps that did not pass.
for f in "$R"/graph-*.txt "$R"/diff-*.txt; do
  [ -f "$f" ] || continue
  n=$(basename "$f" .txt)
  grep -h "^GRAPH\|^DIFF" "$f" | sed "s/^/CHECK $n /"
  grep -q "^ok\|^PASS" "$f" || echo "CHECK $n did not pass (see $n.txt)"
  grep -q "^GRAPH\|^DIFF" "$f" || echo "CHECK $n did not run (no GRAPH or DIFF line: see $n.txt)"
done >>"$R/summary.txt"
grep "^CHECK .*did not \|^CHECK .* [1-9][0-9]* mismatched\|^CHECK .*wrong=[1-9]" "$R/summary.txt" | sed 's/^/   /' | tee -a "$R/steps.txt"
log done
