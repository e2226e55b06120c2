#!/usr/bin/env bash
# Installs the Debian packages the build needs. Idempotent: skips apt when all are present.
set -euo pipefail
PKGS=(bazel-bootstrap bazel-rules-java bazel-platforms default-jdk-headless
      g++ libabsl-dev libboost-graph-dev libgloo-dev libopenblas-dev libdlpack-dev
      nlohmann-json3-dev libcli11-dev libhiredis-dev libbenchmark-dev libgtest-dev libgmock-dev
      libonnx-dev libprotobuf-dev libeigen3-dev librandom123-dev graphviz)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi

# cuDNN's header-only C++ frontend (DESIGN §8: fused attention through the cuDNN graph API), from
# PyPI's nvidia-cudnn-frontend wheel, into $DTENSOR_CUDNN_FRONTEND (default
# ~/.cache/dtensor/cudnn_frontend)/include, where //tools/cuda:cuda_configure.bzl looks for it.
# Only with a CUDA toolkit and without DTENSOR_CPU_ONLY (scripts/run_main.sh's CPU build), and optional: without pip or network the build goes on, and the cuDNN
# attention entry points throw an error saying the frontend was not found.
CUDNN_FRONTEND_VERSION=1.32.0
fe_dir="${DTENSOR_CUDNN_FRONTEND:-$HOME/.cache/dtensor/cudnn_frontend}"
if [ -z "${DTENSOR_CPU_ONLY:-}" ] && [ -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ] &&
   [ "$(cat "$fe_dir/VERSION" 2>/dev/null)" != "$CUDNN_FRONTEND_VERSION" ]; then
  if python3 -m pip --version >/dev/null 2>&1; then
    tmp=$(mktemp -d)
    if python3 -m pip download --quiet --no-deps --dest "$tmp" \
         "nvidia-cudnn-frontend==$CUDNN_FRONTEND_VERSION"; then
      rm -rf "$fe_dir.new" && mkdir -p "$fe_dir.new"
      python3 - "$tmp" "$fe_dir.new" <<'PY'
import glob, sys, zipfile
wheel = zipfile.ZipFile(glob.glob(sys.argv[1] + "/*.whl")[0])
names = [n for n in wheel.namelist()
         if n.startswith("include/") or "/licenses/" in n]
wheel.extractall(sys.argv[2], names)
PY
      echo "$CUDNN_FRONTEND_VERSION" > "$fe_dir.new/VERSION"
      rm -rf "$fe_dir" && mv "$fe_dir.new" "$fe_dir"
      echo "install_deps: cuDNN frontend $CUDNN_FRONTEND_VERSION headers in $fe_dir/include"
    else
      echo "install_deps: warning: could not download nvidia-cudnn-frontend; building without it" >&2
    fi
    rm -rf "$tmp"
  else
    echo "install_deps: warning: no pip; building without cuDNN's C++ frontend" >&2
  fi
fi
