#!/usr/bin/env bash
# The pipeline bubble measured by `dtensor train --mesh pp=...` (Gloo processes, float32) against the
# planner's prediction ((p - 1) / v over m + (p - 1) / v, planner/pipeline.h), for 1F1B and
# interleaved 1F1B. Measured: the time every rank waits in send/recv over its pipeline time (steps
# after the first), summed over ranks. Runs each configuration RUNS times, interleaved.
# Usage: bench/pipeline_bubble.sh [RUNS] (after bazel build //tools:dtensor)
set -euo pipefail
runs="${1:-3}"
bin=bazel-bin/tools/dtensor
hw=bench/calibration/gloo-4ranks-quiet-2core.json  # `dtensor calibrate` of a 2-core VM like this one
model="--layers 4 --dim 256 --heads 4 --seq 64 --batch 16 --steps 20 --sample 0 --hardware $hw"
configs=("--mesh pp=2 --micro-batches 4" "--mesh pp=2 --micro-batches 8" "--mesh pp=2 --micro-batches 4 --virtual-stages 2"
         "--mesh pp=2,tp=2 --micro-batches 4" "--mesh pp=2,tp=2 --micro-batches 4 --virtual-stages 2"
         "--mesh pp=4 --micro-batches 8")
for ((r = 1; r <= runs; ++r)); do
  for c in "${configs[@]}"; do
    line=$("$bin" train --backend gloo $c $model 2>&1 | grep "^bubble:")
    meas=$(sed -E 's/.*measured ([0-9.]+).*/\1/' <<<"$line")
    pred=$(sed -E 's/.*planner ([0-9.]+).*/\1/' <<<"$line")
    echo "run $r | $c | measured $meas | planner $pred | $(awk -v m="$meas" -v p="$pred" 'BEGIN{printf "%+.0f%%", 100*(m-p)/p}')"
  done
done
