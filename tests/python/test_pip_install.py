# `pip install .` (pyproject.toml, python/build_backend/dtensor_build.py) into a fresh virtual
# environment, offline, then `import dtensor` from a folder outside the checkout with no PYTHONPATH:
# the installed package, not the checkout's, runs an op on thread ranks.
import os
import subprocess
import sys

from launching import ROOT


def test_pip_install_into_a_fresh_venv_imports_from_anywhere(tmp_path):
    venv = tmp_path / "venv"
    # --system-site-packages: numpy (a requirement) comes from this interpreter's site; nothing is
    # downloaded (--no-index).
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    py = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run([py, "-m", "pip", "install", "--no-index", "--disable-pip-version-check", "-q",
                          os.path.normpath(ROOT)], env=env, capture_output=True, text=True, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = ("import dtensor, numpy as np\n"
              "from dtensor import Shard\n"
              "def f(w):\n"
              "    m = dtensor.init_device_mesh('cpu', (2,))\n"
              "    a = dtensor.distribute_tensor(np.arange(6.0).reshape(3, 2), m, [Shard(0)])\n"
              "    return (a @ dtensor.ops.t(a)).full_tensor().tolist()\n"
              "print(dtensor.__file__)\n"
              "print(dtensor.run_threads(2, f)[0])\n")
    run = subprocess.run([py, "-c", script], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    where, result = run.stdout.strip().splitlines()[-2:]
    assert where.startswith(str(venv)), where  # the installed copy, not the checkout's
    assert result == "[[1.0, 3.0, 5.0], [3.0, 13.0, 23.0], [5.0, 23.0, 41.0]]"
