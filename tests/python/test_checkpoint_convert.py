# dtensor.checkpoint: a `dtensor train --save` checkpoint as torch.distributed.checkpoint (DCP) and
# back. The dtensor side is read here by bench/train_vs_torch.py's own reader (numpy, independent of
# the C++ loader the conversion uses) and the PyTorch side is that file's GPT, which names its
# parameters as dtensor's GPT does.
import importlib.util
import json
import os
import subprocess

import numpy as np
import pytest

from launching import LAUNCHER, ROOT

torch = pytest.importorskip("torch")
import torch.distributed.checkpoint as dcp  # noqa: E402

import dtensor.checkpoint  # noqa: E402

MODEL = dict(layers=2, dim=32, heads=4, seq=16, batch=2)


def bench():
    spec = importlib.util.spec_from_file_location("train_vs_torch", os.path.join(ROOT, "bench", "train_vs_torch.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def train(tmp, *args):
    cmd = [LAUNCHER, "train", "--mesh", "tp=2", "--log-every", "1"] + [f"--{k}={v}" for k, v in MODEL.items()] + list(args)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def torch_gpt(b, vocab):
    return b.make_gpt(torch, vocab, MODEL["layers"], MODEL["dim"], MODEL["heads"], MODEL["seq"])


def test_dtensor_checkpoint_loads_into_pytorch_and_back(tmp_path):
    b = bench()
    ckpt, out = str(tmp_path / "ckpt"), str(tmp_path / "dcp")
    train(tmp_path, "--steps", "3", "--save", ckpt)
    saved, step = b.read_checkpoint(ckpt)
    assert dtensor.checkpoint.to_dcp(ckpt, out) == step == 3

    model = torch_gpt(b, saved["tok_emb.weight"].shape[0])
    state = model.state_dict()
    params = {k for k in saved if not k.endswith((".exp_avg", ".exp_avg_sq"))}
    assert set(state) == params  # every weight has its place in the PyTorch GPT, and no other
    dcp.load(state, checkpoint_id=out, no_dist=True)
    model.load_state_dict(state, strict=True)
    for name, t in model.state_dict().items():
        assert np.array_equal(t.numpy(), saved[name]), name  # bit for bit

    # And back: the DCP checkpoint (moments and step included) as a dtensor checkpoint again.
    back = str(tmp_path / "back")
    assert dtensor.checkpoint.from_dcp(out, back) == 3
    again, again_step = b.read_checkpoint(back)
    assert again_step == 3 and set(again) == set(saved)
    for name, t in saved.items():
        assert np.array_equal(again[name], t), name


def test_pytorch_dcp_checkpoint_trains_in_dtensor(tmp_path):
    # PyTorch's GPT (its own initialization) saved with DCP, converted, and loaded by dtensor train:
    # its first step's loss must be PyTorch's loss of the same weights on the same batch.
    b = bench()
    probe = str(tmp_path / "probe")
    train(tmp_path, "--steps", "1", "--save", probe)  # the vocabulary of the default text
    vocab = b.read_checkpoint(probe)[0]["tok_emb.weight"].shape[0]
    torch.manual_seed(3)
    model = torch_gpt(b, vocab)
    dcp.save(model.state_dict(), checkpoint_id=str(tmp_path / "torch_dcp"), no_dist=True)
    ckpt = str(tmp_path / "from_torch")
    assert dtensor.checkpoint.from_dcp(str(tmp_path / "torch_dcp"), ckpt) == 0  # weights only: fresh AdamW
    record = tmp_path / "record"
    train(tmp_path, "--steps", "1", "--load", ckpt, "--record", str(record))
    losses, tokens = b.read_steps(str(record / "steps.jsonl"))
    x, y = torch.from_numpy(tokens[0, :, :-1]), torch.from_numpy(tokens[0, :, 1:])
    with torch.no_grad():
        logits = model(x)
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).item()
    assert losses[0] == pytest.approx(want, rel=1e-5), (losses[0], want)


def test_conversion_errors_name_the_file(tmp_path):
    with pytest.raises(dtensor.DTensorError, match="no readable dtensor checkpoint at .*nothing"):
        dtensor.checkpoint.to_dcp(str(tmp_path / "nothing"), str(tmp_path / "out"))
    dcp.save({"ids": torch.arange(4)}, checkpoint_id=str(tmp_path / "ints"), no_dist=True)
    with pytest.raises(dtensor.DTensorError, match="tensor 'ids' is torch.int64; accepted: torch.float32"):
        dtensor.checkpoint.from_dcp(str(tmp_path / "ints"), str(tmp_path / "x"))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "metadata.json").write_text(json.dumps({"tensors": [{"name": "w"}]}))
    with pytest.raises(dtensor.DTensorError, match="is not dtensor checkpoint metadata"):
        dtensor.checkpoint.to_dcp(str(bad), str(tmp_path / "out2"))


@pytest.mark.parametrize("shape,match", [
    ([2 ** 62, 4], r"is 73786976294838206464 bytes, more than the 0 bytes of the checkpoint's rank files"),
    ([-1, 4], r"has shape \[-1, 4\]; accepted: a list of non-negative ints"),
    ([2.5], r"has shape \[2.5\]; accepted: a list of non-negative ints"),
    (["3"], r"accepted: a list of non-negative ints"),
])
def test_hostile_metadata_is_refused_before_allocating(tmp_path, shape, match):
    (tmp_path / "metadata.json").write_text(json.dumps(
        {"format": "dtensor-checkpoint/1", "step": 1, "ranks": [0],
         "tensors": [{"name": "w", "shape": shape, "dtype": "float32"}]}))
    with pytest.raises(dtensor.DTensorError, match=match):
        dtensor.checkpoint.to_dcp(str(tmp_path), str(tmp_path / "out"))


def test_hostile_latest_and_bytes_are_refused(tmp_path):
    (tmp_path / "LATEST").write_text("../../etc\n")
    with pytest.raises(dtensor.DTensorError, match="LATEST is corrupted: it holds '../../etc'"):
        dtensor.checkpoint.to_dcp(str(tmp_path), str(tmp_path / "out"))
    (tmp_path / "LATEST").write_bytes(b"\xff\xfe")
    with pytest.raises(dtensor.DTensorError, match="LATEST is unreadable"):
        dtensor.checkpoint.to_dcp(str(tmp_path), str(tmp_path / "out"))
    flat = tmp_path / "flat"
    flat.mkdir()
    (flat / "metadata.json").write_bytes(b"\xff{}")
    with pytest.raises(dtensor.DTensorError, match="no readable dtensor checkpoint"):
        dtensor.checkpoint.to_dcp(str(flat), str(tmp_path / "out"))
    with pytest.raises(dtensor.DTensorError, match="from_dcp: no readable DCP checkpoint"):
        dtensor.checkpoint.from_dcp(str(tmp_path / "missing"), str(tmp_path / "x"))


def test_dcp_tensor_larger_than_its_files_is_refused(tmp_path):
    # A DCP checkpoint whose metadata claims a tensor far larger than its data: refused by size
    # before torch.zeros allocates it.
    import pickle

    dcp.save({"w": torch.zeros(4)}, checkpoint_id=str(tmp_path / "d"), no_dist=True)
    meta_file = tmp_path / "d" / ".metadata"
    meta = pickle.loads(meta_file.read_bytes())
    meta.state_dict_metadata["w"].size = torch.Size([2 ** 40, 2 ** 10])
    meta_file.write_bytes(pickle.dumps(meta))
    with pytest.raises(dtensor.DTensorError, match=r"tensor 'w' of size \[1099511627776, 1024\] is 4503599627370496 bytes"):
        dtensor.checkpoint.from_dcp(str(tmp_path / "d"), str(tmp_path / "x"))
