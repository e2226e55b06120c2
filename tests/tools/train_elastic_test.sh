#!/usr/bin/env bash
# dtensor train --elastic on 4 Gloo processes (dp=2,tp=2, float64, --check), with ranks SIGKILLed by
# the test-only hook DTENSOR_TEST_KILL_AT="RANKS:STEP" (they die after STEP completed steps):
#  1. rank 2 killed after step 3: the survivors agree on generation 1 (members 0,1,3), re-plan
#     dp=3,tp=1 with batch rows 2,1,1, rebuild parameters and AdamW state from the surviving replica,
#     redo step 4 and finish 6 steps; the losses match one rank (--check, 1e-9) and the final
#     checkpoint (parameters and moments) equals, within 1e-9, that of a run that saved at step 3 on
#     dp=2,tp=2 and loaded onto dp=3,tp=1 --rank-weights 1,1,1 for the remaining 3 steps.
#  2. ranks 1 and 3 killed (both holders of tp shard 1): without a checkpoint the survivors stop with
#     an error naming the tensor and the lost ranks (exit 1, within a bound: never a hang).
#  3. the same with --save --save-every 2: the survivors load the step-2 checkpoint onto dp=2,tp=1 and
#     replay from step 3; final checkpoint equal (1e-9) to an uninterrupted dp=2,tp=2 run's.
#  4. grow back with --max-restarts 1 (below).
set -uo pipefail
bin="$1"
diff_bin="$2"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
text=/usr/share/common-licenses/GPL-3
model=(--batch 4 --seq 16 --dim 32 --layers 1 --heads 4 --sample 0 --log-every 1 --check)
run() {  # run LOG ARGS...: dtensor train --backend gloo with the model above; sets $rc
  local log=$1; shift
  timeout 60 "$bin" train --backend gloo --text "$text" "${model[@]}" "$@" >"$log" 2>&1
  rc=$?
}
fail() { echo "FAILED: $1"; [ -n "${2:-}" ] && tail -25 "$2"; fails=$((fails + 1)); }
same() {  # same A B: the two checkpoints' parameters and moments within 1e-9
  "$diff_bin" "$text" 16 32 1 4 "$1" "$2" 1e-9 || fail "checkpoints $1 and $2 differ"
}

# 1. One rank lost: finish on 3 ranks, equal to save at step 3 + load onto dp=3,tp=1.
DTENSOR_TEST_KILL_AT=2:3 run "$tmp/one.log" --elastic --mesh dp=2,tp=2 --steps 6 --timeout 2 --save "$tmp/one"
if [ "$rc" -ne 0 ] || ! grep -q "generation 1, members 0,1,3 (lost 2), redoing step 4" "$tmp/one.log" ||
   ! grep -q "mesh dp=3,tp=1, batch rows 2,1,1" "$tmp/one.log" || ! grep -q "no disk read" "$tmp/one.log" ||
   ! grep -q "^check:.*(ok)" "$tmp/one.log" || ! grep -q "step    6 .*generation 1" "$tmp/one.log"; then
  fail "one rank lost: exit $rc" "$tmp/one.log"
else
  grep "elastic: recovery\|^check:" "$tmp/one.log"
fi
run "$tmp/ref1.log" --mesh dp=2,tp=2 --steps 3 --save "$tmp/ref"
[ "$rc" -eq 0 ] || fail "reference part 1: exit $rc" "$tmp/ref1.log"
# (saved elsewhere: its --check reruns from --load after the save)
run "$tmp/ref2.log" --mesh dp=3,tp=1 --rank-weights 1,1,1 --load "$tmp/ref" --steps 3 --save "$tmp/ref2"
[ "$rc" -eq 0 ] || fail "reference part 2: exit $rc" "$tmp/ref2.log"
same "$tmp/one" "$tmp/ref2"

# 2. Both holders of tp shard 1 lost, no checkpoint: a clear error, exit 1.
t0=$(date +%s)
DTENSOR_TEST_KILL_AT=1,3:3 run "$tmp/two.log" --elastic --mesh dp=2,tp=2 --steps 6 --timeout 2
elapsed=$(($(date +%s) - t0))
if [ "$rc" -ne 1 ] || [ "$elapsed" -gt 40 ] ||
   ! grep -q "cannot rebuild the model: no surviving rank holds '.*held only by rank(s) 1, 3, all lost" "$tmp/two.log" ||
   ! grep -q "no checkpoint to replay from" "$tmp/two.log"; then
  fail "two ranks lost without a checkpoint: exit $rc after ${elapsed} s (want 1 and an error naming the lost block)" "$tmp/two.log"
else
  echo "ok: two ranks lost -> exit $rc after ${elapsed} s: $(grep -m1 -o 'cannot rebuild.*all lost' "$tmp/two.log")"
fi

# 3. The same with checkpoints every 2 steps: replay from step 2 on ranks 0,2 (dp=2,tp=1: the planner
#    predicts it faster than dp=1,tp=2).
DTENSOR_TEST_KILL_AT=1,3:3 run "$tmp/replay.log" --elastic --mesh dp=2,tp=2 --steps 6 --timeout 2 \
  --save "$tmp/replay" --save-every 2
if [ "$rc" -ne 0 ] || ! grep -q "loaded the last checkpoint .* (step 2) and replaying from step 3" "$tmp/replay.log" ||
   ! grep -q "members 0,2 (lost 1,3)" "$tmp/replay.log" || ! grep -q "mesh dp=2,tp=1" "$tmp/replay.log" ||
   ! grep -q "^check:.*(ok)" "$tmp/replay.log"; then
  fail "two ranks lost with --save-every 2: exit $rc" "$tmp/replay.log"
else
  grep "elastic: state\|^check:" "$tmp/replay.log"
fi
run "$tmp/whole.log" --mesh dp=2,tp=2 --steps 6 --save "$tmp/whole"
[ "$rc" -eq 0 ] || fail "uninterrupted reference: exit $rc" "$tmp/whole.log"
same "$tmp/replay" "$tmp/whole"

# 5. A kill during the recovery's redistribution: rank 2 killed after step 3, then rank 3 (test-only
#    DTENSOR_TEST_KILL_IN_RECOVERY=3) as the survivors' rebuild starts: generation 1 fails during its
#    recovery, the two left agree on generation 2 (dp=2,tp=1, the planner's faster; replica 0 whole)
#    and finish; equal to save at step 3 + load onto dp=2,tp=1.
DTENSOR_TEST_KILL_AT=2:3 DTENSOR_TEST_KILL_IN_RECOVERY=3 run "$tmp/during.log" --elastic --mesh dp=2,tp=2 --steps 6 \
  --timeout 2 --save "$tmp/during"
if [ "$rc" -ne 0 ] || ! grep -q "generation 1 failed during recovery" "$tmp/during.log" ||
   ! grep -q "generation 2, members 0,1 (lost 3), redoing step 4" "$tmp/during.log" ||
   ! grep -q "mesh dp=2,tp=1" "$tmp/during.log" || ! grep -q "^check:.*(ok)" "$tmp/during.log"; then
  fail "a kill during the recovery: exit $rc" "$tmp/during.log"
else
  grep "generation 2\|^check:" "$tmp/during.log"
fi
run "$tmp/ref5.log" --mesh dp=2,tp=1 --load "$tmp/ref" --steps 3 --save "$tmp/ref5"
[ "$rc" -eq 0 ] || fail "reference for a kill during the recovery: exit $rc" "$tmp/ref5.log"
same "$tmp/during" "$tmp/ref5"

# 4. Grow back (--max-restarts 1): rank 2 killed after step 3 and restarted by the launcher. (a) At
#    once: taken into the survivors' own generation 1, which is dp=2,tp=2 again. (b) Held back
#    (test-only DTENSOR_TEST_REJOIN_AFTER=1) until the survivors run generation 1 on dp=3,tp=1: it
#    joins at a step boundary, generation 2 returns to dp=2,tp=2. Either way the rejoined rank's
#    shards and moments come from the members (no disk), and the final state equals an uninterrupted
#    dp=2,tp=2 run's (1e-9).
run "$tmp/whole12.log" --mesh dp=2,tp=2 --steps 12 --save "$tmp/whole12"
[ "$rc" -eq 0 ] || fail "uninterrupted 12-step reference: exit $rc" "$tmp/whole12.log"
DTENSOR_TEST_KILL_AT=2:3 run "$tmp/grow.log" --elastic --max-restarts 1 --mesh dp=2,tp=2 --steps 12 --timeout 2 \
  --save "$tmp/grow"
if [ "$rc" -ne 0 ] || ! grep -q "restarting it (1 of 1)" "$tmp/grow.log" ||
   ! grep -q "generation [12], members 0,1,2,3 (rejoined 2)" "$tmp/grow.log" ||
   ! grep -q "state sent from the members' replicas" "$tmp/grow.log" ||
   ! grep -q "^done: 12 steps, final generation [12] (members 0,1,2,3, mesh dp=2,tp=2" "$tmp/grow.log" ||
   ! grep -q "^check:.*(ok)" "$tmp/grow.log"; then
  fail "grow back at once: exit $rc" "$tmp/grow.log"
else
  grep "rejoined\|^done" "$tmp/grow.log"
fi
same "$tmp/grow" "$tmp/whole12"
DTENSOR_TEST_REJOIN_AFTER=1 DTENSOR_TEST_KILL_AT=2:3 run "$tmp/grow2.log" --elastic --max-restarts 1 --mesh dp=2,tp=2 \
  --steps 12 --timeout 2 --save "$tmp/grow2"
if [ "$rc" -ne 0 ] || ! grep -q "generation 1, members 0,1,3 (lost 2)" "$tmp/grow2.log" ||
   ! grep -q "(generation 1, mesh dp=3,tp=1)" "$tmp/grow2.log" ||
   ! grep -q "generation 2, members 0,1,2,3 (rejoined 2)" "$tmp/grow2.log" ||
   ! grep -q "^done: 12 steps, final generation 2 (members 0,1,2,3, mesh dp=2,tp=2" "$tmp/grow2.log" ||
   ! grep -q "^check:.*(ok)" "$tmp/grow2.log"; then
  fail "grow back at a step boundary: exit $rc" "$tmp/grow2.log"
else
  grep "rejoined\|^done" "$tmp/grow2.log"
fi
same "$tmp/grow2" "$tmp/whole12"

# Flags an elastic run does not take: a usage error (exit 2) naming the flag and what is accepted.
for bad in "--backend threads --elastic|accepted with --elastic: --backend gloo" \
           "--backend gloo --elastic --mesh pp=2,tp=2|accepted with --elastic: --mesh tp=N or dp=M,tp=N" \
           "--backend gloo --save-every 2|accepted with --save DIR" \
           "--backend gloo --max-restarts 1|accepted with --elastic"; do
  args=${bad%%|*}; want=${bad#*|}
  out=$("$bin" train $args --steps 1 2>&1); rc=$?
  if [ "$rc" -ne 2 ] || ! echo "$out" | grep -q -- "$want"; then
    fail "dtensor train $args: exit $rc, want 2 and '$want': $out"
  fi
done

echo "train elastic: $fails failure(s)"
[ "$fails" -eq 0 ]
