#!/usr/bin/env bash
# `dtensor calibrate` on the command line: bad input exits 1 (runtime) or 2 (usage) with a
# `dtensor: error:` line naming the problem, never by a signal; short thread and Gloo runs write a
# profile that `dtensor explain --hardware FILE` uses.
set -uo pipefail
bin="$1"
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

EXPECT_TIMEOUT=120
source "$(dirname "$0")/cli_expect.sh"

out="$tmp/p.json"
expect 2 "--backend 'mpi'"     -- calibrate --backend mpi --out "$out"
expect 2 "--out"               -- calibrate --backend threads
expect 2 "cannot write"        -- calibrate --backend threads --out /nonexistent/dir/p.json
expect 2 "it is a directory"   -- calibrate --backend threads --out "$tmp"
expect 2 "out of range"        -- calibrate --backend threads --sizes 2:64 --out "$out"
expect 2 "out of range"        -- calibrate --backend threads --sizes 8:2G --out "$out"
expect 2 "out of range"        -- calibrate --backend threads --sizes 6:64 --out "$out"
expect 2 "above max"           -- calibrate --backend threads --sizes 64:8 --out "$out"
expect 2 "expected MIN:MAX"    -- calibrate --backend threads --sizes 64 --out "$out"
expect 2 "expected MIN:MAX"    -- calibrate --backend threads --sizes 8:99999999999G --out "$out"
expect 2 "--iters"             -- calibrate --backend threads --iters 0 --out "$out"
expect 2 "--ranks"             -- calibrate --backend threads --ranks 1 --out "$out"
expect 2 "not measured"        -- calibrate --backend threads --kinds barrier --out "$out"
expect 2 "unknown hardware"    -- calibrate --backend threads --base tpu --out "$out"
expect 1 "dtensor launch"      -- calibrate --backend gloo --out "$out"
# NCCL: without a CUDA build, without a GPU, or outside a launcher: a clear error, exit 1.
expect 1 "calibrate --backend nccl" -- calibrate --backend nccl --out "$out"
test ! -e "$out" || { echo "FAILED: a rejected run wrote $out"; fails=$((fails + 1)); }

# A short run on 4 thread ranks writes a profile that explain accepts and that changes its cost.
expect 0 "wrote $out" -- calibrate --backend threads --ranks 4 --sizes 8:2K --iters 2 --warmup 1 --out "$out"
req='{"mesh": [4], "op": "exp", "args": [{"shape": [16, 8], "placements": ["P(sum)"]}], "kwargs": {}}'
with_file=$(echo "$req" | "$bin" explain --hardware "$out")
default=$(echo "$req" | "$bin" explain)
cost() { sed -n 's/.*"cost_us":\([0-9.e+-]*\).*/\1/p' <<<"$1"; }
if [ -z "$(cost "$with_file")" ] || [ "$(cost "$with_file")" = "$(cost "$default")" ]; then
  echo "FAILED: explain --hardware $out: '$with_file' against the default '$default'"
  fails=$((fails + 1))
else
  echo "ok: explain --hardware FILE costs $(cost "$with_file") us (default profile: $(cost "$default") us)"
fi
expect 0 "" -- plan --model gpt2 --mesh tp=4 --hardware "$out"
# --refit fits the kept measurements again: the same profile's numbers, nothing measured.
refit="$tmp/refit.json"
expect 0 "wrote $refit" -- calibrate --refit "$out" --out "$refit"
if ! python3 - "$out" "$refit" <<'PY'
import json, sys
a, b = (json.load(open(f))["links"]["intra_host"]["collectives"] for f in sys.argv[1:3])
assert a.keys() == b.keys() and all(a[k]["by_group_size"] == b[k]["by_group_size"] and
                                    a[k]["measured"] == b[k]["measured"] for k in a), "refit differs"
PY
then echo "FAILED: --refit did not reproduce the fit of $out"; fails=$((fails + 1)); fi
python3 -c 'import json,sys; p=json.load(open(sys.argv[1])); del p["links"]["intra_host"]["collectives"]["all_reduce"]["measured"]; json.dump(p, open(sys.argv[2], "w"))' "$out" "$tmp/unmeasured.json"
expect 1 "no 'measured' list"  -- calibrate --refit "$tmp/unmeasured.json" --out "$refit"
expect 2 "--rounds"            -- calibrate --backend threads --rounds 0 --out "$out"
expect 2 "unknown hardware"    -- train --hardware tpu --steps 1
expect 0 "done: 2 steps"       -- train --hardware "$out" --mesh tp=2 --steps 2 --batch 2 --seq 8 --dim 16 \
  --layers 1 --heads 2 --sample 0 --log-every 1

# Two Gloo processes under dtensor launch: rank 0 writes the profile.
gloo="$tmp/gloo.json"
expect 0 "wrote $gloo" -- launch -n 2 -- "$bin" calibrate --backend gloo --sizes 8:512 --iters 2 --warmup 1 \
  --kinds all_reduce,broadcast --out "$gloo"
expect 0 "" -- plan --model gpt2 --mesh tp=2 --hardware "$gloo"

[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
