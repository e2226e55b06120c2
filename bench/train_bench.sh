#!/usr/bin/env bash
# Tokens/s of the default `dtensor train` model at tp = 1, 2, 4 on threads and on Gloo processes, and
# the bytes rank 0 sends per step against Megatron's formula. Prints a Markdown table.
#
# Megatron's per-step traffic for this model (ring all-reduce: each rank sends 2(n-1)/n of the
# payload, all-gather (n-1)/n), activations [b, s, h] float32:
#   per layer: 2 all-reduces forward + 2 backward  -> 4 * 2(n-1)/n * b*s*h*4
#   vocab-parallel embedding: 1 all-reduce forward -> 2(n-1)/n * b*s*h*4
#   column-parallel lm_head gathered to R: all-gather of [b, s, V] forward -> (n-1)/n * b*s*V*4,
#   and the all-reduce of its input gradient backward -> 2(n-1)/n * b*s*h*4
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bazel-bin/tools/dtensor
steps=${STEPS:-60}
b=8; s=64; h=64; L=2
echo "| backend | mesh | tokens/s | bytes/step measured | bytes/step Megatron formula |"
echo "|---|---|---:|---:|---:|"
for backend in threads gloo; do
  for n in 1 2 4; do
    out=$($bin train --backend $backend --mesh tp=$n --steps $steps --log-every 1000 --sample 0 2>&1 | grep '^done:')
    tps=$(echo "$out" | sed -E 's/.* ([0-9]+) tokens\/s.*/\1/')
    bytes=$(echo "$out" | sed -E 's/.*, ([0-9]+) bytes sent.*/\1/')
    V=$($bin train --steps 1 --sample 0 2>&1 | sed -nE 's/.*vocab ([0-9]+),.*/\1/p')
    formula=$(awk -v n=$n -v b=$b -v s=$s -v h=$h -v L=$L -v V=$V 'BEGIN {
      ar = 2 * (n - 1) / n; ag = (n - 1) / n; a = b * s * h * 4;
      printf "%d", L * 4 * ar * a + ar * a + ag * b * s * V * 4 + ar * a }')
    echo "| $backend | tp=$n | $tps | $bytes | $formula |"
  done
done
