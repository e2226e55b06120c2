# Starting a script as ranks of a job from the Python tests: the checkout's paths, and one way to run
# a command under `dtensor launch` or torchrun with the package importable and a bounded timeout.
import os
import subprocess
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
LAUNCHER = os.path.join(ROOT, "bazel-bin", "tools", "dtensor")


def dtensor_launch(n, *args):
    """argv of `dtensor launch -n N -- python3 ARGS...` (the launcher must be built)."""
    assert os.path.exists(LAUNCHER), "build //tools:dtensor first (scripts/test.sh does)"
    return [LAUNCHER, "launch", "-n", str(n), "--", sys.executable, *args]


def torchrun(n, *args):
    """argv of `torchrun --standalone --nproc-per-node N ARGS...`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(n), *args]


def run_job(cmd, timeout, drop=(), **env_extra):
    """Runs cmd with python/ on PYTHONPATH and a 60 s collective timeout, minus the variables in
    `drop` (and PYTHONUNBUFFERED), plus env_extra; returns the CompletedProcess (text output)."""
    # Ranks share one output pipe: with PYTHONUNBUFFERED set (as on some machines) print() writes
    # a line in pieces and two ranks' lines interleave ("rdzvrdzv 1 ..."); buffered, a line is one
    # write, which a pipe keeps whole.
    env = {k: v for k, v in os.environ.items() if k not in drop and k != "PYTHONUNBUFFERED"}
    env.update(PYTHONPATH=os.path.join(ROOT, "python"), DTENSOR_TIMEOUT="60", **env_extra)
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def launch_script(tmp_path, text, n, lines, timeout):
    """Writes `text` to a script under tmp_path and runs it as n ranks under `dtensor launch`;
    checks that the job exits 0 and that its output holds each of `lines` (e.g. one "rank R: ok"
    per rank). Returns the CompletedProcess."""
    script = tmp_path / "ranks.py"
    script.write_text(text)
    out = run_job(dtensor_launch(n, str(script)), timeout=timeout)
    assert out.returncode == 0, out.stdout + out.stderr
    for line in lines:
        assert line in out.stdout, out.stdout
    return out
