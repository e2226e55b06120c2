# A script written for torch.distributed.tensor (distribute_tensor, `@`, torch functions, autograd
# from requires_grad leaves, nn.Parameter, redistribute, from_local, full_tensor) runs unchanged with
# `import dtensor as dt` in its place, under torchrun and `dtensor launch`: tests/python/
# torch_api_ranks.py checks every result against plain tensors on each rank, and here the dtensor
# runs are compared with the same script run on torch.distributed.tensor.
import json

import pytest

from launching import dtensor_launch, run_job, torchrun

torch = pytest.importorskip("torch")

SCRIPT = __file__.replace("test_torch_api.py", "torch_api_ranks.py")
DROP = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "DTENSOR_STORE")


def results(cmd, tmp_path):
    out = run_job(cmd, timeout=240, drop=DROP, TMPDIR=str(tmp_path))
    assert out.returncode == 0, f"{' '.join(cmd)}:\n{out.stdout}\n{out.stderr}"
    # One record per rank; ranks share the output pipe, so records are found by their marker.
    decoder = json.JSONDecoder()
    lines = [decoder.raw_decode(part)[0] for part in out.stdout.split("RESULT ")[1:]]
    assert sorted(r["rank"] for r in lines) == [0, 1, 2, 3], out.stdout
    return sorted(lines, key=lambda r: r["rank"])


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    return results(torchrun(4, SCRIPT, "torch"), tmp_path_factory.mktemp("torch"))


@pytest.mark.parametrize("launcher", ["torchrun", "dtensor launch"])
def test_torch_script_runs_on_dtensor(launcher, torch_run, tmp_path):
    cmd = (torchrun if launcher == "torchrun" else dtensor_launch)(4, SCRIPT, "dtensor")
    ours = results(cmd, tmp_path)
    for mine, theirs in zip(ours, torch_run):
        assert mine["weight_placements"] == theirs["weight_placements"] == ["S(0)"]
        assert mine["loss"] == pytest.approx(theirs["loss"], rel=1e-12)
        assert mine["linear"] == pytest.approx(theirs["linear"], rel=1e-12)
        assert mine["w_grad"] == pytest.approx(theirs["w_grad"], rel=1e-12, abs=1e-14)


def test_torch_tensors_give_torch_tensors():
    """One class per use: torch in gives a torch.Tensor subclass, numpy in the native DTensor."""
    import numpy as np

    import dtensor

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        t = dtensor.distribute_tensor(torch.ones(4, 2), mesh, [dtensor.Shard(0)])
        n = dtensor.distribute_tensor(np.ones((4, 2)), mesh, [dtensor.Shard(0)])
        f = dtensor.DTensor.from_local(torch.ones(2, 2), mesh, [dtensor.Shard(0)])
        r = dtensor.distribute_tensor(torch.ones(3), mesh)  # torch's default: Replicate
        native = t.to_dtensor()
        return (isinstance(t, torch.Tensor), isinstance(n, dtensor.DTensor), isinstance(f, torch.Tensor),
                tuple(f.shape), [p.is_replicate() for p in r.placements], isinstance(native, dtensor.DTensor),
                tuple(native.shape))

    for got in dtensor.run_threads(2, rank):
        assert got == (True, True, True, (4, 2), [True], True, (4, 2))
