#!/usr/bin/env bash
# The GPU check (#15 item 5), for a machine with an NVIDIA GPU: builds what it needs, then
#   1. every GPU test (bazel test //tests/cuda/..., with the skipped tests counted: a test that skips
#      on a machine with a GPU is a failure here),
#   2. dtensor train --device cuda --check on the threads backend (tp=2 against one rank),
#   3. the same with --backend nccl (one process per GPU, tp=2, or tp=1 on a one-GPU machine),
#   4. bench/cuda_bench (HBM fraction of the memory-bound kernels, bf16 GEMM against cuBLAS, cuDNN
#      SDPA TFLOP/s),
# and prints one summary table for BENCHMARKS.md, with the device's name. Exits 0 when every step
# passed, 1 when one failed, and 1 with a message when no GPU is visible (nothing checked).
#
# Usage: bash scripts/gpu_check.sh [--quick]   (--quick: cuda_bench with a short minimum time)
set -uo pipefail
cd "$(dirname "$0")/.."
quick=0
[ "${1:-}" = "--quick" ] && quick=1

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no GPU visible (nvidia-smi -L lists none): nothing was checked" >&2
  exit 1
fi
device=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
status=()  # "step|result|detail" rows for the table
record() { status+=("$1|$2|$3"); }

bash scripts/install_deps.sh >/dev/null || { echo "gpu_check: scripts/install_deps.sh failed" >&2; exit 1; }
if ! bazel build //tests/cuda/... //bench:cuda_bench //tools:dtensor >"$out/build.log" 2>&1; then
  tail -30 "$out/build.log"
  echo "gpu_check: build failed" >&2
  exit 1
fi

# 1. GPU tests. A skip means the test found no usable device although nvidia-smi lists one.
bazel test --nocache_test_results --test_output=errors //tests/cuda/... >"$out/tests.log" 2>&1
tests_rc=$?
passed=$(grep -cE '^//tests/cuda:.* +PASSED' "$out/tests.log" || true)
failed=$(grep -cE '^//tests/cuda:.* +(FAILED|TIMEOUT|NO STATUS)' "$out/tests.log" || true)
skips=$(cat bazel-testlogs/tests/cuda/*/test.log 2>/dev/null | grep -c '\[  SKIPPED \]' || true)
if [ "$tests_rc" -eq 0 ] && [ "$skips" -eq 0 ]; then
  record "GPU tests (//tests/cuda/...)" pass "$passed targets, no skipped test"
else
  record "GPU tests (//tests/cuda/...)" FAIL "$passed passed, $failed failed, $skips skipped tests"
  grep -E 'FAILED|SKIPPED|no CUDA device' "$out/tests.log" bazel-testlogs/tests/cuda/*/test.log | head -20
fi

# 2. Training on the GPU, checked against one rank.
if bazel-bin/tools/dtensor train --device cuda --mesh tp=2 --steps 20 --check --log-every 1000 --sample 0 \
     >"$out/train.log" 2>&1; then
  record "train --device cuda --mesh tp=2 --check" pass "$(grep -E '^check:' "$out/train.log" | head -1)"
else
  record "train --device cuda --mesh tp=2 --check" FAIL "$(tail -1 "$out/train.log")"
fi
fallbacks=$(grep -iE 'host fallback' "$out/train.log" | head -1)
[ -n "$fallbacks" ] && record "host fallbacks in train" info "$fallbacks"
# 3. The same on NCCL processes, one per GPU (at most 2), against one rank.
gpus=$(nvidia-smi -L | grep -c '^GPU ')
nccl_tp=$((gpus < 2 ? gpus : 2))
if bazel-bin/tools/dtensor train --backend nccl --device cuda --mesh tp=$nccl_tp --steps 20 --check \
     --log-every 1000 --sample 0 >"$out/train_nccl.log" 2>&1; then
  record "train --backend nccl --device cuda --mesh tp=$nccl_tp --check" pass "$(grep -E '^check:' "$out/train_nccl.log" | head -1)"
else
  record "train --backend nccl --device cuda --mesh tp=$nccl_tp --check" FAIL "$(tail -1 "$out/train_nccl.log")"
fi
fallbacks=$(grep -iE 'host fallback' "$out/train_nccl.log" | head -1)
[ -n "$fallbacks" ] && record "host fallbacks in train (nccl)" info "$fallbacks"

# 4. Kernel benchmarks.
bench_args=(--benchmark_counters_tabular=true)
[ "$quick" -eq 1 ] && bench_args+=(--benchmark_min_time=0.05)
if bazel-bin/bench/cuda_bench "${bench_args[@]}" >"$out/bench.log" 2>&1; then
  record "bench/cuda_bench" pass "table below"
else
  record "bench/cuda_bench" FAIL "$(tail -1 "$out/bench.log")"
fi

echo
echo "## GPU check, $(date -u '+%Y-%m-%d %H:%M UTC'), $device"
echo
echo "| step | result | detail |"
echo "|---|---|---|"
rc=0
for row in "${status[@]}"; do
  IFS='|' read -r step result detail <<<"$row"
  echo "| $step | $result | $detail |"
  [ "$result" = FAIL ] && rc=1
done
echo
echo '```'
grep -vE '^(\*\*\*|Running|Run on|CPU Caches|  L[123]|Load Average)' "$out/bench.log"
echo '```'
exit "$rc"
