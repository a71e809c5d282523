# steps.sh — sourced by the GPU scripts (run-all.sh, check-kernel.sh): bounded steps whose
# output lands in $R, packed into $FINAL/$PACK after every step, so that a device call that
# runs out of time still returns what it measured. The caller sets R, FINAL, PACK, T0,
# DEADLINE (seconds after T0 by which every step must end) and SUMMARY (an extended regular
# expression: the lines of a step's output echoed as its summary).
pack() { tar czf "$FINAL/$PACK.tmp" -C "$R" . && mv "$FINAL/$PACK.tmp" "$FINAL/$PACK"; }
log() { echo "== +$(($(date +%s) - T0))s $*" | tee -a "$R/steps.txt"; }
step() { # step NAME SECONDS CMD...
  local name=$1 secs=$2; shift 2
  local left=$((DEADLINE - ($(date +%s) - T0)))
  if [ "$left" -lt 15 ]; then log "$name skipped: the call's time is spent"; return; fi
  [ "$secs" -gt "$left" ] && secs=$left
  log "$name (bound ${secs}s)"
  timeout "$secs" "$@" >"$R/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc" | tee -a "$R/steps.txt"
  grep -E "$SUMMARY" "$R/$name.txt" | head -30 | sed 's/^/   /' | tee -a "$R/steps.txt"
  pack
}
# bwbest prints each variant's and operation's best of-memcpy over its BenchmarkBandwidth shapes.
bwbest() {
  awk '$1 ~ /^BenchmarkBandwidth\// {
    n = split($1, p, "/"); if (n < 4) next
    v = ""; for (i = 2; i <= NF; i++) if ($i == "of-memcpy") v = $(i - 1)
    if (v == "") next
    k = p[2] " " p[3]; at = p[4]; sub(/-[0-9]+$/, "", at)
    if (!(k in best) || v + 0 > best[k] + 0) { best[k] = v; where[k] = at }
  } END { for (k in best) printf "BW best %s %s of memcpy (%s)\n", k, best[k], where[k] }' "$1" | sort
}
