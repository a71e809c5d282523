#!/usr/bin/env bash
# prepare-ab.sh — on the development machine (Go, no GPU): builds what
# bench/gpu/run-callbench-ab.sh runs on the GPU machine, for a commit
# before a change (BEFORE, default 34d87e3: the branch point of issue 21)
# and for the working tree (after): each one's cuda.test (BenchmarkCallHost)
# and NCCL library (make -C ncclabi install-shared), packed into
# .device/ab/ab.tgz (git-ignored; about 30 MiB: carry it with the device
# tool's `carry: [".device/ab"]`, alone, to stay under the carry limit).
#
#   BEFORE=34d87e3 bash bench/gpu/prepare-ab.sh
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
D=$ROOT/.device/ab
BEFORE=${BEFORE:-34d87e3}
W=$(mktemp -d /tmp/theseus-ab.XXXXXX)
trap 'rm -rf "$W"' EXIT
build() { # build SRC DEST (and the build's own GPU scripts and C test programs: each
  # build's callbench.c is compiled against its own nccl.h, and runs on its own default context)
  (cd "$1" && go test -c -ldflags="-s -w" -o "$2/cuda.test" ./cuda &&
    make -C ncclabi install-shared PREFIX="$2/prefix" >/dev/null &&
    mkdir -p "$2/tree/ncclabi/testdata" && cp -r ncclabi/gpu "$2/tree/ncclabi/" &&
    cp -r ncclabi/testdata/ctest "$2/tree/ncclabi/testdata/" &&
    mkdir -p "$2/tree/examples/contexts" && cp -r examples/contexts/default "$2/tree/examples/contexts/")
}
mkdir -p "$W/src" "$W/pack/before" "$W/pack/after"
git -C "$ROOT" archive "$BEFORE" | tar -x -C "$W/src"
build "$W/src" "$W/pack/before"
git -C "$ROOT" rev-parse "$BEFORE" >"$W/pack/before/COMMIT"
build "$ROOT" "$W/pack/after"
{ git -C "$ROOT" rev-parse HEAD; git -C "$ROOT" status --porcelain | head -5; } >"$W/pack/after/COMMIT"
rm -rf "$D"
mkdir -p "$D"
tar czf "$D/ab.tgz" -C "$W/pack" .
du -sh "$D/ab.tgz"
