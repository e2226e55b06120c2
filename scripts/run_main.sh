#!/usr/bin/env bash
# The main job on its built-in default: installs what the build needs, builds the `dtensor` command
# and runs `dtensor demo` (4 Gloo processes on a 2x2 mesh). Extra arguments go to `dtensor demo`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
bazel build //tools:dtensor
exec bazel-bin/tools/dtensor demo "$@"
