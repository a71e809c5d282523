#!/usr/bin/env bash
# minimpirun.sh N PROGRAM [ARGS...] — starts N processes of a program built
# against ncclabi/gpu/minimpi (MINIMPI_RANK/SIZE/DIR set), waits for all,
# prints rank 0's output, then every other rank's output when it failed or
# when MINIMPI_ALL_OUTPUT=1, and exits non-zero if any rank failed.
set -u
n=$1; shift
dir=$(mktemp -d /tmp/minimpi.XXXXXX)
trap 'rm -rf "$dir"' EXIT
pids=()
for ((r = 0; r < n; r++)); do
  MINIMPI_RANK=$r MINIMPI_SIZE=$n MINIMPI_DIR=$dir "$@" >"$dir/out.$r" 2>&1 &
  pids+=($!)
done
status=0
for ((r = 0; r < n; r++)); do
  if ! wait "${pids[$r]}"; then
    echo "minimpirun: rank $r failed" >&2
    status=1
  fi
done
cat "$dir/out.0"
for ((r = 1; r < n; r++)); do
  if [ "$status" != 0 ] || [ "${MINIMPI_ALL_OUTPUT:-0}" = 1 ]; then
    echo "---- rank $r ----"
    cat "$dir/out.$r"
  fi
done
exit $status
