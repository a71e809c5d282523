#!/usr/bin/env bash
# Builds .device/ctx/<name> for rA.sh (on the development machine): the default context plus one
# preferred LL one-shot allreduce entry with K channels (ch1 .. ch16), each linted.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
for k in 1 2 4 8 16; do
  d=.device/ctx/ch$k
  rm -rf "$d"; mkdir -p "$d"
  cp examples/contexts/default/*.jsonl "$d/"
  echo '{"gen":"oneshot","protocol":"ll","collective":"allreduce","channels":'$k',"max_bytes":4194304,"usable":"nranks > 1","preference":"msgsize <= ll_max_bytes ? 50 : 0","name":"allreduce_oneshot_ll_k'$k'","comment":"rA.sh: the LL one-shot with '$k' channels"}' >>"$d/schedule_manifest.jsonl"
  go run ./cmd/theseusc lint "$d" >/dev/null
done
