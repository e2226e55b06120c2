# torch.distributed.checkpoint (DCP) on bridge tensors, run as 4 ranks (tests/python/test_dcp.py):
# saved on one layout, loaded on others (another mesh shape, uneven and weighted shards, plain torch
# tensors, PyTorch's DTensor) and back, each load compared bit for bit with the tensors saved.
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
import torch.distributed.tensor as tdt
import torch.nn as nn
from torch.distributed.device_mesh import init_device_mesh as torch_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

import dtensor
from dtensor import Replicate, Shard, bridge

root = sys.argv[1]
dist.init_process_group("gloo")   # DCP coordinates its ranks over torch's default group
rank = dist.get_rank()
mesh4 = dtensor.init_device_mesh("cpu", (4,))
mesh22 = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))

g = torch.Generator().manual_seed(0)
FULL = {
    "w": torch.randn(10, 6, generator=g, dtype=torch.float64),             # 10 rows over 4: 3,3,3,1
    "b": torch.randn(7, generator=g),
    "e": torch.randn(5, 9, generator=g).to(torch.bfloat16),
    "i": torch.randint(-1000, 1000, (6, 4), generator=g),
}


def check(loaded, what):
    for k, want in FULL.items():
        got = loaded[k]
        got = got.full_tensor() if isinstance(got, torch.Tensor) and hasattr(got, "full_tensor") else got
        assert got.dtype == want.dtype and torch.equal(got, want), f"{what}: '{k}' differs from the saved tensor"


def zeros_on(mesh, placements):
    return {k: dtensor.distribute_tensor(torch.zeros_like(v), mesh, placements[k]) for k, v in FULL.items()}


# 1. Saved at tp=4 (uneven Shard(0), Replicate, Shard(1), weighted shard).
saved = {"w": dtensor.distribute_tensor(FULL["w"], mesh4, [Shard(0)]),
         "b": dtensor.distribute_tensor(FULL["b"], mesh4, [Replicate()]),
         "e": dtensor.distribute_tensor(FULL["e"], mesh4, [Shard(1)]),
         "i": dtensor.distribute_tensor(FULL["i"], mesh4, [Shard(0, weights=[3, 1, 1, 1])])}
dcp.save(saved, checkpoint_id=f"{root}/tp4")

# 2. Loaded at dp=2,tp=2 on other placements: every rank's block resharded from the saved chunks.
on22 = zeros_on(mesh22, {"w": [Replicate(), Shard(1)], "b": [Shard(0), Shard(0)],
                         "e": [Shard(0), Replicate()], "i": [Shard(1), Shard(0, weights=[1, 2])]})
dcp.load(on22, checkpoint_id=f"{root}/tp4")
check(on22, "tp=4 -> dp=2,tp=2")

# 3. Into plain torch tensors (every rank reads the whole tensor).
plain = {k: torch.zeros_like(v) for k, v in FULL.items()}
dcp.load(plain, checkpoint_id=f"{root}/tp4")
check(plain, "tp=4 -> plain torch")

# 4. Into PyTorch's DTensor, and PyTorch's save back into bridge tensors.
tmesh = torch_mesh("cpu", (2, 2))
theirs = {k: tdt.distribute_tensor(torch.zeros_like(v), tmesh, [tdt.Shard(0), tdt.Replicate()])
          for k, v in FULL.items()}
dcp.load(theirs, checkpoint_id=f"{root}/tp4")
check(theirs, "tp=4 -> PyTorch DTensor")
dcp.save({k: tdt.distribute_tensor(v, tmesh, [tdt.Replicate(), tdt.Shard(0)]) for k, v in FULL.items()},
         checkpoint_id=f"{root}/torch")
back = zeros_on(mesh4, {"w": [Shard(1)], "b": [Shard(0)], "e": [Shard(0)], "i": [Replicate()]})
dcp.load(back, checkpoint_id=f"{root}/torch")
check(back, "PyTorch DTensor -> bridge tp=4")

# 5. A bridged model's state_dict: saved tensor-parallel, loaded into a model with the other plan
#    (its parameters filled in place) and into a plain nn.Module.
def model():
    return nn.Sequential(nn.Linear(6, 12, dtype=torch.float64), nn.ReLU(), nn.Linear(12, 5, dtype=torch.float64))


torch.manual_seed(1)
src = model()
want = {k: v.clone() for k, v in src.state_dict().items()}
src = bridge.parallelize_module(src, mesh4, {"0": ColwiseParallel(), "2": RowwiseParallel()})
dcp.save(src.state_dict(), checkpoint_id=f"{root}/model")
torch.manual_seed(2)
dst = bridge.parallelize_module(model(), mesh4, {"0": RowwiseParallel(), "2": ColwiseParallel()})
sd = dst.state_dict()
dcp.load(sd, checkpoint_id=f"{root}/model")
for k, v in dst.state_dict().items():
    assert torch.equal(v.full_tensor(), want[k]), f"model parameter '{k}' was not loaded in place"
x = torch.randn(3, 6, dtype=torch.float64, generator=g)
plain_model = model()
plain_sd = plain_model.state_dict()
dcp.load(plain_sd, checkpoint_id=f"{root}/model")
plain_model.load_state_dict(plain_sd)
for k, v in plain_model.state_dict().items():
    assert torch.equal(v, want[k]), f"plain model parameter '{k}' differs from the saved one"
y = dst(dtensor.distribute_tensor(x, mesh4)).full_tensor()
assert torch.allclose(plain_model(x), y, rtol=1e-12, atol=1e-12)  # the same weights: the same outputs

# 6. Partial pieces are not a chunk: refused with a message.
try:
    dcp.save({"p": dtensor.DTensor.from_local(torch.ones(2), mesh4, [dtensor.Partial()])},
             checkpoint_id=f"{root}/partial")
except (dtensor.DTensorError, CheckpointException) as e:  # DCP gathers the ranks' errors in one
    assert "holds Partial pieces" in str(e), e
else:
    raise AssertionError("a Partial bridge tensor was saved")

print(f"rank {rank}: dcp ok", flush=True)
del saved, on22, back, src, dst, sd
dtensor.exit_process()  # both groups closed; torch's Gloo workers can abort a rank at teardown
