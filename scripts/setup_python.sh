#!/usr/bin/env bash
# Installs the pinned PyPI packages of the Python package (python/) into the first python3 on PATH,
# the interpreter that Bazel's @python_config builds the extension for and the tests run.
# Idempotent: does nothing when every pin is already installed.
# torch is part of the package's tests (interop with torch.distributed.tensor, PyTorch's OpInfo
# samples as the oracle, the side-by-side benchmarks): a ~0.5 GB wheel plus its CUDA dependencies
# (~4 GB on disk). DTENSOR_WITH_TORCH=0 leaves it out; the tests that need it then skip, saying so.
# transformers comes with torch: dtensor.plan is tested on its GPT-2 and Llama built from configs
# with random weights (tests/python/test_planning.py); nothing is downloaded at test time.
# torchvision likewise: its ResNet-50 and ViT-B/16 (tests/python/test_plan_torchvision.py).
set -euo pipefail
cd "$(dirname "$0")/.."

python=${DTENSOR_PYTHON:-python3}
# pytest-xdist (with its execnet): the test command runs the Python tests on two workers.
pins=(nanobind==2.9.2 numpy==2.2.6 pytest==8.3.5 pytest-xdist==3.8.0 execnet==2.1.2)
# expecttest: torch's OpInfo database (torch.testing._internal) imports it.
# onnx: torch.onnx.export's TorchScript exporter needs it (tests/python/test_onnx_import.py).
if [ "${DTENSOR_WITH_TORCH:-1}" != 0 ]; then pins+=(torch==2.15.0 expecttest==0.3.0 transformers==5.23.0 onnx==1.19.1); fi
# Installed with --no-deps: no torchvision release is built for torch 2.15 yet (0.29.2 is for 2.14),
# and pip must not resolve torch or numpy again against it; the models used are pure Python (its
# compiled detection and image ops are not needed). pillow, its one other requirement, is pinned here.
no_deps_pins=()
if [ "${DTENSOR_WITH_TORCH:-1}" != 0 ]; then no_deps_pins+=(torchvision==0.29.2 pillow==13.0.0); fi

# Python's headers: the extension compiles against them (Debian's python3-dev for /usr/bin/python3;
# pyenv and other builds from source ship them already).
include=$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
if [ ! -f "$include/Python.h" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-dev
fi

# venv with ensurepip: tests/python/test_pip_install.py installs the package into a fresh virtual
# environment (Debian splits it out of python3 as python3-venv).
if ! "$python" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-venv
fi

if ! "$python" -m pip --version >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  $SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q python3-pip
fi
# Debian's own python3 refuses pip installs outside a virtual environment (PEP 668) unless told.
pip_flags=(--quiet --disable-pip-version-check)
if "$python" -c 'import sys, sysconfig, os; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["stdlib"], "EXTERNALLY-MANAGED")))'; then
  pip_flags+=(--break-system-packages)
fi

# The pins of "$@" whose installed version differs.
missing_of() {
  for pin in "$@"; do
    name=${pin%%==*}; version=${pin##*==}
    have=$("$python" -c "import importlib.metadata as m; print(m.version('$name'))" 2>/dev/null || true)
    [ "$have" = "$version" ] || echo "$pin"
  done
}
mapfile -t missing < <(missing_of "${pins[@]}")
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_python: installing ${missing[*]}"
  "$python" -m pip install "${pip_flags[@]}" "${missing[@]}"
fi
mapfile -t missing < <(missing_of ${no_deps_pins[@]+"${no_deps_pins[@]}"})
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup_python: installing ${missing[*]} (--no-deps)"
  "$python" -m pip install "${pip_flags[@]}" --no-deps "${missing[@]}"
fi
