# dtensor.checkpoint.save is crash-safe: a rank SIGKILLed in the middle of a save (its data written,
# the save not committed) leaves the previous save the one dtensor.checkpoint.load reads, bit for
# bit; the next save commits and removes the failed one's folder (tests/python/dcp_crash_ranks.py,
# 2 processes under `dtensor launch` per step).
import os

import pytest

from launching import dtensor_launch, run_job

pytest.importorskip("torch")

SCRIPT = __file__.replace("test_dcp_crash.py", "dcp_crash_ranks.py")
DROP = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "DTENSOR_STORE")


def job(tmp_path, *args):
    return run_job(dtensor_launch(2, SCRIPT, str(tmp_path / "ckpt"), *args), timeout=180, drop=DROP,
                   TMPDIR=str(tmp_path))


def test_a_killed_save_leaves_the_previous_one(tmp_path):
    out = job(tmp_path, "save", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    out = job(tmp_path, "crash", "2")
    assert out.returncode != 0 and "the save returned" not in out.stdout + out.stderr, out.stdout + out.stderr
    folders = sorted(e for e in os.listdir(tmp_path / "ckpt") if e.startswith("dcp-"))
    assert len(folders) == 2, folders  # the committed one and the failed one's
    out = job(tmp_path, "load", "1")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 1: loaded version 1" in out.stdout
    out = job(tmp_path, "save", "3")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "rank 0: loaded version 3" in out.stdout
    folders = sorted(e for e in os.listdir(tmp_path / "ckpt") if e.startswith("dcp-"))
    assert len(folders) == 2 and folders[0].startswith("dcp-00000001-"), folders  # kept: 1 and 3's; the failed one gone
    assert (tmp_path / "ckpt" / "LATEST").read_text().split() == [folders[1], folders[0]]


def test_errors(tmp_path):
    import torch
    from dtensor import DTensorError, checkpoint
    with pytest.raises(DTensorError, match=r"load: .* holds no committed save \(no LATEST\) and is no DCP checkpoint"):
        checkpoint.load({"w": torch.zeros(2)}, str(tmp_path))
    (tmp_path / "LATEST").write_text("../../etc\n")
    with pytest.raises(DTensorError, match=r"LATEST is corrupted: it holds '../../etc'"):
        checkpoint.latest(str(tmp_path))
    (tmp_path / "LATEST").write_bytes(b"\xff\xfe dcp")
    with pytest.raises(DTensorError, match=r"LATEST is unreadable"):
        checkpoint.load({"w": torch.zeros(2)}, str(tmp_path))
    (tmp_path / "LATEST").write_text("dcp-00000001-0123abcd\n")  # a well-formed name, no such folder
    with pytest.raises(DTensorError, match=r"LATEST is corrupted"):
        checkpoint.latest(str(tmp_path))
    with pytest.raises(DTensorError, match=r"keep = 0; accepted: at least 1"):
        checkpoint.save({"w": torch.zeros(2)}, str(tmp_path / "c"), keep=0)
