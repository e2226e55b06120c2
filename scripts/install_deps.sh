#!/usr/bin/env bash
# Installs the Debian packages the build needs. Idempotent: skips apt when all are present.
set -euo pipefail
PKGS=(bazel-bootstrap bazel-rules-java bazel-platforms default-jdk-headless
      g++ libabsl-dev libboost-graph-dev libgloo-dev libopenblas-dev libdlpack-dev
      nlohmann-json3-dev libcli11-dev libhiredis-dev libbenchmark-dev libgtest-dev libgmock-dev
      graphviz)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
