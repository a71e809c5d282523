#!/usr/bin/env bash
# run_lostpeer.sh — a rank SIGKILLed in the middle of a collective on the
# CUDA backend (ncclabi/testdata/ctest/lostpeer.c, as capitest's
# TestLostPeer runs it on the host backend): 2 processes on one GPU under
# MPS; the survivor's watchdog thread polls ncclCommGetAsyncError and
# aborts while its main thread waits ("sync"), keeps calling ("call") or
# destroys the communicator ("destroy"), ROUNDS times each (default 3);
# then sigstack.c (a host-process signal handler runs on a 256 KiB
# alternate stack on threads that called the library).
#
#   THESEUS_PREFIX=.device/prefix bash ncclabi/gpu/run_lostpeer.sh
#
# Success: each run prints the survivor's "LOSTPEER rank 0 mode ..." and
# "DONE rank 0" (rc 0), the victim's rc is 137 (SIGKILL), and
# "SIGSTACK main/thread onstack 1 size 262144" then "DONE"; the script exits
# 0 only then.
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
export THESEUS_DEBUG=WARN THESEUS_DEBUG_SUBSYS=INIT THESEUS_TIMEOUT=${THESEUS_TIMEOUT:-20000} LOSTPEER_CUDA=1
start_mps
trap stop_mps EXIT
W=$(mktemp -d /tmp/lostpeer.XXXXXX)
for p in lostpeer sigstack; do
  cc -O2 -Wall -pthread -I"$PREFIX/include" -o "$W/$p" "$ROOT/ncclabi/testdata/ctest/$p.c" \
    -L"$PREFIX/lib" -ltheseus_nccl -Wl,-rpath,"$PREFIX/lib" -ldl || exit 2
done
fail=0
for mode in sync call destroy; do
  printf '#!/bin/sh\nexec %s %s "$@"\n' "$W/lostpeer" "$mode" >"$W/lp-$mode"
  chmod +x "$W/lp-$mode"
  for r in $(seq "${ROUNDS:-3}"); do
    out=$W/$mode-$r
    # run_pair fails by design here (the victim dies): not a reason to stop.
    rcs=$(run_pair "$out" "$W/lp-$mode" 2>&1 | sed -n 's/^rc //p' || true) # "survivor/victim"
    line=$(grep -h "^LOSTPEER rank 0" "$out.0" || echo "no LOSTPEER line")
    echo "mode $mode round $r: rc $rcs: $line"
    grep -h "^FAIL" "$out.0" "$out.1" | sed 's/^/  /' || true
    if [ "$rcs" != "0/137" ] || ! grep -q "^DONE rank 0" "$out.0"; then
      fail=1
      tail -20 "$out.0" | sed 's/^/  rank0| /'
    fi
  done
done
if "$W/sigstack" >"$W/sigstack.out" 2>&1 && grep -q "SIGSTACK main onstack 1 size 262144" "$W/sigstack.out" &&
  grep -q "SIGSTACK thread onstack 1 size 262144" "$W/sigstack.out"; then
  grep -h "^SIGSTACK" "$W/sigstack.out"
else
  fail=1
  cat "$W/sigstack.out"
fi
echo "lostpeer: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
