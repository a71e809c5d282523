#!/usr/bin/env bash
# run_replay_check.sh — the repeats of an NCCL data call launched from C
# compute what calls through Go compute (docs/ncclabi.md, "Replay from
# C"): ncclabi/testdata/ctest/replay_check.c, built here with the system
# compiler against the installed nccl.h, as 2 processes on one GPU under
# MPS, with THESEUS_REPLAY=1 (and the selector's epoch every 7 calls, so
# that the record's budget ends inside every sequence), THESEUS_REPLAY=1
# with the default period, and THESEUS_REPLAY=0. Each run must pass every
# check; with THESEUS_REPLAY=1 the destroy lines must count calls launched
# from C, with 0 none.
#
#   THESEUS_PREFIX=.device/prefix bash ncclabi/gpu/run_replay_check.sh
source "$(dirname "$0")/common.sh"
need_prefix
theseus_env
export THESEUS_DEBUG=INFO THESEUS_DEBUG_SUBSYS=INIT
start_mps
trap stop_mps EXIT
W=$(mktemp -d /tmp/replay-check.XXXXXX)
cc -O2 -Wall -I"$PREFIX/include" -o "$W/replay_check" "$ROOT/ncclabi/testdata/ctest/replay_check.c" \
  -L"$PREFIX/lib" -ltheseus_nccl -Wl,-rpath,"$PREFIX/lib" -ldl -lm -lpthread || exit 2
fail=0
for cfg in "1 7" "1 1000" "0 7"; do
  set -- $cfg
  out=$W/replay$1-period$2
  echo "== THESEUS_REPLAY=$1 THESEUS_CONTEXT_CHECK_PERIOD=$2"
  THESEUS_REPLAY=$1 THESEUS_CONTEXT_CHECK_PERIOD=$2 run_pair "$out" "$W/replay_check" || fail=1
  grep -h -E "^(CHECK|FAIL|NATIVE|DONE)" "$out.0" "$out.1" | sed "s/^/  /"
  grep -h -o "destroyed: [0-9]* requests served natively ([0-9]* of them launched from C)" "$out.0" "$out.1" | sed "s/^/  /"
  fromC=$(grep -h -o "([0-9]* of them launched from C)" "$out.0" "$out.1" | awk '{ s += substr($1, 2) } END { print s + 0 }')
  if grep -q "^FAIL\|FAILED" "$out.0" "$out.1"; then fail=1; fi
  if [ "$1" = 1 ] && [ "$fromC" = 0 ]; then echo "  no call was launched from C"; fail=1; fi
  if [ "$1" = 0 ] && [ "$fromC" != 0 ]; then echo "  calls were launched from C with THESEUS_REPLAY=0"; fail=1; fi
done
echo "REPLAYCHECK $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
