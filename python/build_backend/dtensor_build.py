"""The in-tree PEP 517 build backend of `pip install .` (pyproject.toml): builds the extension with
Bazel (the project's build; `scripts/install_deps.sh` and `scripts/setup_python.sh` install what it
needs) and packs python/dtensor with it into a wheel for the running interpreter. Standard library
only, so pip needs nothing from the network to build it.

    pip install .                 # from the checkout: a wheel built here, installed
    pip wheel . -w dist/          # the wheel only

The wheel holds the package's sources and `dtensor/_dtensor.so` (linked against the system's Gloo,
OpenBLAS and Abseil, which stay system packages). The extension is built for the Python whose
headers Bazel's @python_config found (the first python3 on PATH); a wheel for another Python version
is refused, naming both.
"""
import base64
import hashlib
import os
import subprocess
import sys
import sysconfig
import zipfile

NAME, VERSION = "dtensor", "0.1.0"
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
TARGET = "//python:dtensor/_dtensor.so"


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    return f"{impl}-{impl}-{sysconfig.get_platform().replace('-', '_').replace('.', '_')}"


def _metadata():
    return (f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n"
            "Summary: Tensor-parallel DTensors with torch.distributed.tensor's names, in native code\n"
            "Requires-Python: >=3.9\nRequires-Dist: numpy\n")


def _user_env():
    """This process's environment without pip's build isolation (its PATH entries and Python
    variables): Bazel's @python_config looks for python3 and nanobind on PATH
    (tools/python/python_configure.bzl), and a PATH that differs from the user's would also make it
    re-run and rebuild the extension."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONNOUSERSITE", "PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if "pip-build-env-" not in p)
    return env


def _built_extension():
    """Builds the extension with Bazel and returns its path; raises naming what failed."""
    env = _user_env()
    bazel = subprocess.run(["bazel", "build", TARGET], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    if bazel.returncode != 0:
        raise RuntimeError(f"dtensor: `bazel build {TARGET}` failed in {ROOT} (run scripts/install_deps.sh and "
                           f"scripts/setup_python.sh first):\n{bazel.stdout[-4000:]}")
    so = os.path.join(ROOT, "bazel-bin", "python", "dtensor", "_dtensor.so")
    if not os.path.isfile(so):
        raise RuntimeError(f"dtensor: {so} was not built (Bazel found no Python headers or nanobind: "
                           f"run scripts/setup_python.sh)")
    # The extension's Python version: the interpreter Bazel built it for must be this one.
    probe = subprocess.run(["python3", "-c", "import sys; print(f'{sys.version_info.major}.{sys.version_info.minor}')"],
                           cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    built_for, running = probe.stdout.strip(), f"{sys.version_info.major}.{sys.version_info.minor}"
    if built_for != running:
        raise RuntimeError(f"dtensor: the extension is built for Python {built_for} (python3 on PATH) but pip runs "
                           f"Python {running}; install with that Python, or put this one first on PATH")
    return so


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    info = os.path.join(metadata_directory, f"{NAME}-{VERSION}.dist-info")
    os.makedirs(info, exist_ok=True)
    with open(os.path.join(info, "METADATA"), "w") as f:
        f.write(_metadata())
    return os.path.basename(info)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    files = {}
    src = os.path.join(ROOT, "python", "dtensor")
    for name in sorted(os.listdir(src)):
        if name.endswith(".py"):
            with open(os.path.join(src, name), "rb") as f:
                files[f"dtensor/{name}"] = f.read()
    with open(_built_extension(), "rb") as f:
        files["dtensor/_dtensor.so"] = f.read()
    info = f"{NAME}-{VERSION}.dist-info"
    files[f"{info}/METADATA"] = _metadata().encode()
    files[f"{info}/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: dtensor_build\nRoot-Is-Purelib: false\n"
                              f"Tag: {_tag()}\n").encode()
    record = [_record_line(k, v) for k, v in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = f"{NAME}-{VERSION}-{_tag()}.whl"
    # Written to a temporary name and renamed: an interrupted build leaves no half wheel.
    tmp = os.path.join(wheel_directory, wheel + ".part")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arcname, data in files.items():
            z.writestr(arcname, data)
    os.replace(tmp, os.path.join(wheel_directory, wheel))
    return wheel
