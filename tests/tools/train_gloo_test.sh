#!/usr/bin/env bash
# `dtensor train` on Gloo processes: tp=2, tp=4, dp=2 x tp=2 (plain and sequence parallel), a
# mixture of experts on ep=2 x tp=2 (tokens exchanged by all_to_all_v between processes) and context
# parallel on cp=2 and cp=2 x tp=2 (ring attention's rounds between processes) train 20 steps with
# the same losses as one rank (--check fails the run above 1e-9 relative).
set -euo pipefail
bin="$1"
for args in "--mesh tp=2" "--mesh tp=4" "--mesh dp=2,tp=2" "--mesh dp=2,tp=2 --sequence-parallel --loss-parallel" \
            "--mesh ep=2,tp=2 --moe 4 --top-k 2" "--mesh cp=2 --context-parallel" "--mesh cp=2,tp=2"; do
  out=$("$bin" train --backend gloo $args --steps 20 --batch 4 --seq 16 --dim 32 --layers 1 --sample 0 --check 2>&1) || {
    echo "FAILED: dtensor train --backend gloo $args"; echo "$out"; exit 1; }
  echo "$out" | grep "^check:"
  echo "$out" | grep -q "(ok)" || { echo "FAILED: no ok check for $args"; exit 1; }
done
# Pipeline parallel on 4 processes: 1F1B (pp=2 x tp=2) and interleaved 1F1B (2 virtual stages;
# pp=4 with 2 each), where --check also compares the first step's gradients with one rank's.
for args in "--mesh pp=2,tp=2 --layers 2 --micro-batches 4" "--mesh pp=2,tp=2 --layers 4 --virtual-stages 2 --micro-batches 2" \
            "--mesh pp=4 --layers 8 --virtual-stages 2 --micro-batches 4"; do
  out=$("$bin" train --backend gloo $args --steps 5 --batch 4 --seq 16 --dim 32 --sample 0 --check 2>&1) || {
    echo "FAILED: dtensor train --backend gloo $args"; echo "$out"; exit 1; }
  echo "$out" | grep -E "^(check|bubble):"
  [ "$(echo "$out" | grep -c "(ok)")" = 2 ] || { echo "FAILED: no ok gradient and loss checks for $args"; exit 1; }
done
echo "gloo training matches one rank"
