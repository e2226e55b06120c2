# One rank of test_torch_interop.py (4 processes: torchrun, or `dtensor launch`): torch DTensors of
# every placement on meshes [4] and [2, 2] go to dtensor (from_torch) and back (to_torch), sharing the
# local shard; full tensors, local shapes (uneven ones too) and an op's result must agree with torch.
import itertools
import os

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor as TorchDTensor, Partial, Replicate, Shard, distribute_tensor

import dtensor

if "MASTER_ADDR" in os.environ:  # torchrun
    dist.init_process_group("gloo")
else:  # dtensor launch sets no MASTER_ADDR: torch rendezvous in a file of the job's fresh store folder
    store_dir = os.environ["DTENSOR_STORE"].removeprefix("file:")
    dist.init_process_group("gloo", init_method=f"file://{store_dir}/torch-init-file",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
rank = dist.get_rank()
assert dist.get_world_size() == 4

torch.manual_seed(0)  # the same data on every rank
FULL = {(8, 6): torch.randn(8, 6, dtype=torch.float64), (7, 5): torch.randn(7, 5, dtype=torch.float64)}
W = torch.randn(5, 3, dtype=torch.float64)
REDUCE = ("sum", "avg", "max", "min")


def same_memory(a, b):
    return a.numel() == 0 or a.data_ptr() == b.data_ptr()


def partial_locals(full, placements, mesh):
    """Each rank's summand of `full` for Partial mesh dims (the others chunk it as torch does)."""
    local = distribute_tensor(full, mesh, [Replicate() if p.is_partial() else p for p in placements]).to_local()
    local = local.clone()
    for i, p in enumerate(placements):
        if p.is_partial():
            c = mesh.get_local_rank(i)
            n = mesh.size(i)
            # sum/avg: the ranks' values add (or average) up to the full value; max/min: one rank holds it
            if p.reduce_op == "sum":
                local = local * (c + 1) / (n * (n + 1) / 2)
            elif p.reduce_op == "max":
                local = local - c
            elif p.reduce_op == "min":
                local = local + c
    return local


def check(t, full, tmesh, what):
    d = dtensor.from_torch(t)
    assert d.shape == tuple(t.shape) and list(d.placements) == [
        dtensor.Partial(p.reduce_op) if p.is_partial() else
        dtensor.Shard(p.dim) if p.is_shard() else dtensor.Replicate() for p in t.placements], what
    assert d.device_mesh.shape == tuple(tmesh.shape) and d.device_mesh.mesh_dim_names == list(tmesh.mesh_dim_names or [])
    local, tlocal = d.to_local(), t.to_local()
    assert isinstance(local, torch.Tensor) and local.shape == tlocal.shape, (what, local.shape, tlocal.shape)
    assert same_memory(local, tlocal), what
    got = d.full_tensor()
    assert torch.allclose(got, t.full_tensor(), rtol=1e-12) and torch.allclose(got, full, rtol=1e-12), what

    back = dtensor.to_torch(d, tmesh)  # the way back, still the same memory
    assert list(back.placements) == list(t.placements) and back.shape == t.shape, what
    assert same_memory(back.to_local(), tlocal), what
    assert torch.allclose(back.full_tensor(), full, rtol=1e-12), what

    y = dtensor.to_torch(dtensor.ops.add(d, d), tmesh)  # a dtensor op, its result seen by torch
    assert torch.allclose(y.full_tensor(), 2 * full, rtol=1e-12), what


cases = 0
for shape, names in (((4,), None), ((2, 2), ("dp", "tp"))):
    tmesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    for full in FULL.values():
        for placements in itertools.product([Shard(0), Shard(1), Replicate()], repeat=len(shape)):
            check(distribute_tensor(full, tmesh, list(placements)), full, tmesh, f"{shape} {placements}")
            cases += 1
        for op in REDUCE:
            for placements in ([[Partial(op)]] if len(shape) == 1 else
                               [[Partial(op), Shard(0)], [Shard(1), Partial(op)], [Partial(op), Partial(op)]]):
                local = partial_locals(full, placements, tmesh)
                t = TorchDTensor.from_local(local, tmesh, placements, run_check=False, shape=full.shape,
                                            stride=full.stride())
                check(t, full, tmesh, f"{shape} {placements}")
                cases += 1

    # An op across the two libraries: torch's rows of x times a replicated w, multiplied by dtensor.
    x = distribute_tensor(FULL[(7, 5)], tmesh, [Shard(0)] + [Replicate()] * (len(shape) - 1))
    w = distribute_tensor(W, tmesh, [Replicate()] * len(shape))
    y = dtensor.to_torch(dtensor.ops.mm(dtensor.from_torch(x), dtensor.from_torch(w)), tmesh)
    assert torch.allclose(y.full_tensor(), FULL[(7, 5)] @ W, rtol=1e-12)

# What has no counterpart, and a torch mesh whose ranks are not dtensor's row-major layout.
tmesh = init_device_mesh("cpu", (4,))
for bad, match in ((TorchDTensor.from_local(torch.ones(2), tmesh, [Partial("product")], run_check=False),
                    "Partial(product)"),
                   (torch.ones(2), "accepted: a torch.distributed.tensor.DTensor")):
    try:
        dtensor.from_torch(bad)
        raise AssertionError(f"no error for {match}")
    except dtensor.DTensorError as e:
        assert match in str(e) and "from_torch" in str(e), str(e)
reversed_mesh = DeviceMesh("cpu", torch.tensor([3, 2, 1, 0]))
d = dtensor.from_torch(distribute_tensor(FULL[(8, 6)], tmesh, [Shard(0)]))
for fn in (lambda: dtensor.to_torch(d, reversed_mesh),
           lambda: dtensor.from_torch(distribute_tensor(FULL[(8, 6)], reversed_mesh, [Shard(0)]))):
    try:
        fn()
        raise AssertionError("no error for a reversed rank layout")
    except dtensor.DTensorError as e:
        assert "rank layout [3, 2, 1, 0]" in str(e) and "row-major" in str(e), str(e)

print(f"rank {rank}: {cases} cases ok", flush=True)
del d, x, w, y  # y shares memory with a dtensor block (DLPack)
dtensor.exit_process()  # both groups closed; torch's Gloo workers can abort a rank at teardown
