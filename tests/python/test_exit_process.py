# dtensor.exit_process (python/dtensor/__init__.py): how a rank that used torch's Gloo group ends
# (docs/PYTHON.md, "Ending a job that uses torch.distributed too"). In a child process: the status
# is the given code, what was printed without a newline is flushed, atexit handlers other than
# dtensor's do not run, torch's process group is destroyed first; bad codes raise before anything
# is closed.
import sys
import textwrap

import pytest

import dtensor
from launching import run_job


def run(body):
    # run_job: the checkout's package on PYTHONPATH, stdout buffered as usual (PYTHONUNBUFFERED dropped).
    return run_job([sys.executable, "-c", textwrap.dedent(body)], timeout=120)


def test_status_flush_and_no_teardown():
    p = run("""
        import atexit, sys, dtensor
        atexit.register(lambda: print("atexit ran"))
        print("unterminated", end="")
        sys.stderr.write("err-unterminated")
        dtensor.exit_process(3)
        print("after")
    """)
    assert p.returncode == 3, p
    assert p.stdout == "unterminated" and p.stderr == "err-unterminated", p


def test_torch_group_destroyed_before_exit():
    pytest.importorskip("torch")
    p = run("""
        import os, tempfile, torch.distributed as dist, dtensor
        dist.init_process_group("gloo", init_method="file://" + tempfile.mktemp(), rank=0, world_size=1)
        real = dist.destroy_process_group
        dist.destroy_process_group = lambda *a, **k: (print("destroyed", dist.is_initialized()), real(*a, **k))
        dtensor.exit_process()
    """)
    assert p.returncode == 0 and p.stdout.strip() == "destroyed True", p


@pytest.mark.parametrize("code", [-1, 256, 1.0, "0", True, None])
def test_bad_codes_raise(code):
    with pytest.raises(ValueError, match=r"exit_process: code must be an int in \[0, 255\]"):
        dtensor.exit_process(code)
