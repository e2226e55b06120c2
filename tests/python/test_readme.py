# The README's Python examples run as written: each block after a "<!-- tested: ... -->" marker is
# extracted and executed (under torchrun with 4 processes when its marker says so), so the first
# commands a newcomer copies cannot drift from the package.
import os
import re
import sys

import pytest

from launching import ROOT, dtensor_launch, run_job, torchrun


def readme_blocks():
    text = open(os.path.join(ROOT, "README.md")).read()
    return re.findall(r"<!-- tested: ([^>]*)-->\n```python\n(.*?)```", text, re.S)


def test_readme_has_tested_examples():
    assert len(readme_blocks()) >= 2


def runs():
    for index, (marker, _) in enumerate(readme_blocks()):
        launchers = [l for l in ("dtensor launch", "torchrun") if l in marker]
        for launcher in launchers or ["python3"]:
            yield index, launcher


@pytest.mark.parametrize("index,launcher", list(runs()))
def test_readme_example_runs(index, launcher, tmp_path):
    marker, code = readme_blocks()[index]
    script = tmp_path / "example.py"
    script.write_text(code)
    if launcher == "torchrun":
        pytest.importorskip("torch")
        cmd = torchrun(4, str(script))
    elif launcher == "dtensor launch":
        pytest.importorskip("torch")
        cmd = dtensor_launch(4, str(script))
    else:
        cmd = [sys.executable, str(script)]
    # The launcher under test sets the rank and rendezvous variables.
    out = run_job(cmd, timeout=240, drop=("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "DTENSOR_STORE"),
                  TMPDIR=str(tmp_path))
    assert out.returncode == 0, f"README example {index} under {launcher}:\n{out.stdout}\n{out.stderr}"
