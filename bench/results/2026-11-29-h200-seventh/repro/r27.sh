#!/usr/bin/env bash
# Device call 27 (2026-11-29, seventh run): the full kernel suite (run-all.sh kernel) at the session's final code.
set -uo pipefail
D=$PWD/.device; tar xzf $D/kern.tgz -C $D
{ date -u +%FT%TZ; cat $D/COMMIT; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > $OUT/machine.txt 2>&1
DEADLINE=480 bash bench/gpu/run-all.sh kernel 2>&1 | tail -40
