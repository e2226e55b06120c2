#!/usr/bin/env bash
# The `dtensor` command line on hostile input: every reproducer below once crashed (SIGABRT, SIGFPE,
# SIGSEGV), hung, or ran on nonsense. Each must now exit 1 (runtime) or 2 (usage) with a
# `dtensor: error:` line naming the flag, never by a signal, and within a few seconds.
set -uo pipefail
bin="$1"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# expect STATUS NEEDLE -- ARGS...: runs `dtensor ARGS` (stdin from /dev/null, 60 s limit) and checks
# the exit status and that NEEDLE appears in what it printed.
expect() {
  local want="$1" needle="$2"
  shift 3
  local out rc
  out=$(timeout -s KILL 60 "$bin" "$@" </dev/null 2>&1)
  rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
    echo "FAILED: dtensor $* -> exit $rc (want $want), output:"
    echo "$out" | head -5
    fails=$((fails + 1))
  else
    echo "ok: dtensor $* -> $rc"
  fi
}

# train: usage errors exit 2 and name the flag.
expect 2 "tp=3 must divide"   -- train --mesh tp=3 --steps 1
expect 2 "--mesh"             -- train --mesh tp=4294967296
expect 2 "at most 1024"       -- train --mesh tp=1000000
expect 2 "--mesh"             -- train --mesh pp=2
expect 2 "--backend"          -- train --backend nccl
expect 2 "--log-every"        -- train --log-every 0
expect 2 "--heads"            -- train --heads 0
expect 2 "--steps"            -- train --steps -1
expect 2 "--batch"            -- train --batch 0
expect 2 "--lr"               -- train --lr nan
expect 2 "--lr"               -- train --lr inf
expect 2 "--text"             -- train --text /nonexistent/file
expect 2 "--dim"              -- train --dim 1000000
expect 2 "needs about"        -- train --mesh tp=1 --dim 65536 --layers 1024 --heads 1
expect 2 "--steps"            -- train --steps 99999999999999
# train: runtime errors exit 1.
expect 1 "checkpoint"         -- train --steps 1 --sample 0 --load "$tmp/no-such-checkpoint"
# An unwritable --save is found before training (a million steps would not finish in the limit).
expect 1 "cannot write"       -- train --steps 1000000 --save /proc/no-such-dir/ckpt
# demo, launch, plan, explain.
expect 2 "--backend"          -- demo --backend nccl
expect 2 "--shape"            -- demo --shape 1,2,3
expect 2 "--nprocs"           -- launch -n 0 -- true
expect 2 "--nprocs"           -- launch -n 2147483647 -- true
expect 2 "--timeout"          -- launch -n 1 --timeout 1e300 -- true
expect 1 "cannot open"        -- explain --cases "$tmp/missing.jsonl"
expect 2 "unknown-flag"       -- train --unknown-flag
expect 2 "subcommand"         --

# explain: one answer per line, whatever the bytes; exit 0 when every line was answered.
printf '{"mesh":[4],"op":"ne\xffg","args":[{"shape":[4]}]}\n\n{"mesh":[4],"op":"neg","args":[{"shape":[4]}]}\n' >"$tmp/in.jsonl"
out=$(timeout -s KILL 60 "$bin" explain --cases "$tmp/in.jsonl" 2>&1)
rc=$?
lines=$(printf '%s\n' "$out" | wc -l)
if [ "$rc" -ne 0 ] || [ "$lines" -ne 3 ] || ! sed -n 3p <<<"$out" | grep -q '"outputs"'; then
  echo "FAILED: explain with invalid UTF-8 and a blank line -> exit $rc, $lines lines:"
  echo "$out"
  fails=$((fails + 1))
else
  echo "ok: explain answers 3 lines for 3 (invalid UTF-8, blank, valid)"
fi

echo "cli hostile input: $fails failure(s)"
[ "$fails" -eq 0 ]
