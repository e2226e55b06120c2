#!/usr/bin/env bash
# Faults during `dtensor train --backend gloo` (two processes): a rank stopped by SIGSTOP is reported
# by the survivor within --timeout + 5 s, naming the rank; a rank killed by SIGKILL makes the
# survivor exit with an error (exit 1), not die by a signal. The run ends non-zero either way.
set -uo pipefail
bin="$1"
tmp=$(mktemp -d)
fails=0
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$tmp"' EXIT
timeout_s=5

# start LOG: a long gloo run in the background; sets $launcher and $victim (rank 1's pid).
start() {
  "$bin" train --backend gloo --mesh tp=2 --steps 1000000 --batch 2 --seq 8 --dim 16 --layers 1 --heads 2 \
    --sample 0 --log-every 1 --timeout "$timeout_s" >"$1" 2>&1 &
  launcher=$!
  victim=""
  for _ in $(seq 600); do  # up to 60 s for both ranks to start and train a few steps
    if grep -q "step *3\b" "$1" 2>/dev/null; then
      for p in $(pgrep -P "$launcher"); do
        tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx 'RANK=1' && victim=$p
      done
      [ -n "$victim" ] && return 0
    fi
    sleep 0.1
  done
  echo "FAILED: training did not start within 60 s:"; cat "$1"
  return 1
}

# SIGSTOP: the survivor's collective times out.
if start "$tmp/stop.log"; then
  kill -STOP "$victim"
  t0=$(date +%s%N)
  wait "$launcher"; rc=$?
  elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
  kill -9 "$victim" 2>/dev/null
  if [ "$rc" -eq 0 ] || [ "$rc" -ge 128 ] || [ "$elapsed_ms" -gt $(((timeout_s + 5) * 1000)) ] ||
     ! grep -q "rank 1" "$tmp/stop.log" || grep -q "killed by signal 6\|Aborted\|terminate called" "$tmp/stop.log"; then
    echo "FAILED: SIGSTOP of rank 1 -> exit $rc after ${elapsed_ms} ms (want an error naming rank 1 within $((timeout_s + 5)) s):"
    tail -8 "$tmp/stop.log"
    fails=$((fails + 1))
  else
    echo "ok: SIGSTOP of rank 1 reported after ${elapsed_ms} ms, exit $rc: $(grep -m1 'rank 1' "$tmp/stop.log")"
  fi
else
  fails=$((fails + 1))
fi

# SIGKILL: the survivor sees the connection close and exits with an error.
if start "$tmp/kill.log"; then
  kill -9 "$victim"
  t0=$(date +%s%N)
  wait "$launcher"; rc=$?
  elapsed_ms=$((($(date +%s%N) - t0) / 1000000))
  if [ "$rc" -eq 0 ] || grep -q "rank 0 killed by signal\|Aborted\|terminate called" "$tmp/kill.log" ||
     ! grep -q "rank 1 killed by signal 9" "$tmp/kill.log" || [ "$elapsed_ms" -gt $(((timeout_s + 5) * 1000)) ]; then
    echo "FAILED: SIGKILL of rank 1 -> exit $rc after ${elapsed_ms} ms (want rank 0 to exit with an error):"
    tail -8 "$tmp/kill.log"
    fails=$((fails + 1))
  else
    echo "ok: SIGKILL of rank 1 -> exit $rc after ${elapsed_ms} ms; $(grep -m1 '^rank 0\|rank 0 exited' "$tmp/kill.log")"
  fi
else
  fails=$((fails + 1))
fi

echo "train faults: $fails failure(s)"
[ "$fails" -eq 0 ]
