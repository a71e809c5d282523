#!/usr/bin/env bash
# make-spec-context.sh OUT — on the development machine (Go and clang-14):
# a selection context in OUT that is the repository's default context plus
# bundles of its small schedules with specialised kernels (theseusc compile
# --specialize; docs/specialize.md) preferred over them where they apply:
# the LL all-pairs allreduce of 2 and 4 ranks and the LL allgather and
# reducescatter of 2 ranks, for float32, bfloat16 and float16. The same
# bundles run the generic kernel with THESEUS_SPECIALIZED=0, so a run can
# measure specialised against generic on the same schedule.
#   THESEUSC=path/to/theseusc (default: go run ./cmd/theseusc)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${1:?usage: make-spec-context.sh OUT}
THESEUSC=${THESEUSC:-}
if [ -z "$THESEUSC" ]; then
  THESEUSC=$(mktemp -d)/theseusc
  (cd "$ROOT" && go build -o "$THESEUSC" ./cmd/theseusc)
fi
DTYPES=${SPEC_DTYPES:-float32,bfloat16,float16}
rm -rf "$OUT"
mkdir -p "$OUT/schedules"
cp "$ROOT"/examples/contexts/default/*.jsonl "$OUT/"
# name algo collective nranks
while read -r name algo coll n; do
  "$THESEUSC" gen "$algo" --coll "$coll" --nranks "$n" --protocol ll --name "$name" -o "$OUT/schedules/$name.json"
  "$THESEUSC" compile "$OUT/schedules/$name.json" --specialize --specialize-dtypes "$DTYPES" -o "$OUT/schedules/$name.tsb"
  rm "$OUT/schedules/$name.json"
  printf '{"file":"schedules/%s.tsb","collective":"%s","nranks":%d,"max_bytes":4194304,"preference":"msgsize <= ll_max_bytes ? 40 : 0","name":"%s","comment":"the default context'"'"'s LL schedule with specialised kernels (bench/gpu/make-spec-context.sh)"}\n' \
    "$name" "$coll" "$n" "$name" >>"$OUT/schedule_manifest.jsonl"
done <<'LIST'
allreduce_n2_oneshot_ll_spec oneshot allreduce 2
allreduce_n4_oneshot_ll_spec oneshot allreduce 4
allgather_n2_direct_ll_spec direct allgather 2
reducescatter_n2_direct_ll_spec direct reducescatter 2
LIST
"$THESEUSC" lint "$OUT" >/dev/null
echo "make-spec-context.sh: $OUT ($(du -sh "$OUT" | cut -f1))"
