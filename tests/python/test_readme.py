# The README's Python examples run as written: each block after a "<!-- tested: ... -->" marker is
# extracted and executed (under torchrun with 4 processes when its marker says so), so the first
# commands a newcomer copies cannot drift from the package.
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def readme_blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.findall(r"<!-- tested: ([^>]*)-->\n```python\n(.*?)```", text, re.S)


def test_readme_has_tested_examples():
    assert len(readme_blocks()) >= 2


@pytest.mark.parametrize("index", range(len(readme_blocks())))
def test_readme_example_runs(index, tmp_path):
    marker, code = readme_blocks()[index]
    script = tmp_path / "example.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"), DTENSOR_TIMEOUT="60",
               TMPDIR=str(tmp_path))
    if "torchrun" in marker:
        pytest.importorskip("torch")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
               "4", str(script)]
    else:
        cmd = [sys.executable, str(script)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240, cwd=tmp_path)
    assert out.returncode == 0, f"README example {index} ({marker.strip()}):\n{out.stdout}\n{out.stderr}"
