#!/usr/bin/env bash
# The main job on its built-in default: installs what the build needs, builds the `dtensor` command
# and runs `dtensor train`: a character-level GPT trained with 4-way tensor parallelism on
# /usr/share/common-licenses/GPL-3 (about a minute on 2 cores). Extra arguments go to `dtensor train`
# (e.g. --mesh dp=2,tp=2 --backend gloo --check).
set -euo pipefail
cd "$(dirname "$0")/.."
# Without a GPU only what the CPU job needs is built (--config=cpu: no CUDA sources; a fresh machine
# reaches the first step in minutes, BENCHMARKS.md "First run"); DTENSOR_FULL_BUILD=1 builds all.
config=()
if [ -z "${DTENSOR_FULL_BUILD:-}" ] && ! nvidia-smi -L >/dev/null 2>&1; then
  config=(--config=cpu)
  export DTENSOR_CPU_ONLY=1
fi
bash scripts/install_deps.sh
bazel build "${config[@]}" //tools:dtensor
exec bazel-bin/tools/dtensor train "$@"
