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
rm -rf "$D/corpus"
if [ -d ../shared/corpus ]; then cp -r ../shared/corpus "$D/corpus"; fi
du -sh "$D"
