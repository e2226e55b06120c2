#!/usr/bin/env bash
# The main job on its built-in default: installs what the build needs, builds the `dtensor` command
# and runs `dtensor train`: a character-level GPT trained with 4-way tensor parallelism on
# /usr/share/common-licenses/GPL-3 (about a minute on 2 cores). Extra arguments go to `dtensor train`
# (e.g. --mesh dp=2,tp=2 --backend gloo --check).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bazel build //tools:dtensor
exec bazel-bin/tools/dtensor train "$@"
