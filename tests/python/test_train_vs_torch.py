# bench/train_vs_torch.py against dtensor train: PyTorch, started from the weights and batches
# `dtensor train --record` wrote, trains the same function (float64 losses within CHECK_RTOL at
# every step), both plain and as PyTorch DTensor tp=2 over Gloo; the checkpoint reader reassembles
# sharded blocks; a disagreement fails loudly.
import importlib.util
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "bench", "train_vs_torch.py")
DTENSOR = os.path.join(ROOT, "bazel-bin", "tools", "dtensor")

pytest.importorskip("torch", reason="torch is not installed (scripts/setup_python.sh installs it): "
                                     "bench/train_vs_torch.py compares with PyTorch")


def bench():
    spec = importlib.util.spec_from_file_location("train_vs_torch", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pytorch_replays_dtensor_training_in_float64():
    assert os.path.exists(DTENSOR), "build //tools:dtensor first (scripts/test.sh does)"
    out = subprocess.run([sys.executable, SCRIPT, "--check-only", "--steps", "5"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    diffs = re.findall(r"^  (.+?)\s+largest relative loss difference (\S+) over 5 steps \(ok\)$", out.stdout, re.M)
    assert [name for name, _ in diffs] == ["plain PyTorch", "PyTorch DTensor tp=2 (Gloo)"], out.stdout
    assert all(float(d) <= bench().CHECK_RTOL for _, d in diffs), diffs


def test_checkpoint_reader_reassembles_shards(tmp_path):
    mod = bench()
    full = {}
    for tp in (1, 2):
        mod.run_dtensor("threads", tp, "default", 1, str(tmp_path / f"tp{tp}"))
        full[tp], step = mod.read_checkpoint(str(tmp_path / f"tp{tp}" / "init"))
        assert step == 0
    assert sorted(full[1]) == sorted(full[2]) and "lm_head.weight" in full[1]
    for name, t in full[1].items():  # the same seeded weights, whether stored whole or in shards
        np.testing.assert_array_equal(full[2][name], t, err_msg=name)


def test_a_disagreement_fails_loudly():
    mod = bench()
    ref = [4.0, 3.5, 3.0]
    assert mod.agree("same", list(ref), ref, 1e-9) == 0.0
    with pytest.raises(SystemExit, match="step 2 loss"):
        mod.agree("off at step 2", [4.0, 3.5 * (1 + 1e-8), 3.0], ref, 1e-9)
    with pytest.raises(SystemExit, match="step 1 loss"):
        mod.agree("nan", [float("nan"), 3.5, 3.0], ref, 1e-9)
