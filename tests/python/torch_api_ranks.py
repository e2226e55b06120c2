# A script written for torch.distributed.tensor, run with `import dtensor as dt` in its place
# (tests/python/test_torch_api.py). argv[1] picks the module: "dtensor" or "torch". Each rank checks
# every result against the same computation on plain tensors and prints one JSON line with them, so
# the test can also compare the two modules' runs with each other.
import json
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

if sys.argv[1] == "dtensor":
    import dtensor as dt
    mesh = dt.init_device_mesh("cpu", (4,))
else:
    import torch.distributed.tensor as dt
    from torch.distributed.device_mesh import init_device_mesh
    mesh = init_device_mesh("cpu", (4,))

# ---- from here on, the same code for both modules ----------------------------------------------


def kinds(placements):
    return ["S(%d)" % p.dim if p.is_shard() else "R" if p.is_replicate() else "P" for p in placements]


def close(got, want, what):
    if not torch.allclose(got, want, rtol=1e-12, atol=1e-12):
        raise AssertionError(f"{what}: max difference {(got - want).abs().max().item():.3g}")


rank = mesh.get_rank()
g = torch.Generator().manual_seed(0)
a = torch.randn(10, 6, generator=g, dtype=torch.float64)   # 10 rows over 4 ranks: uneven shards
b = torch.randn(6, 4, generator=g, dtype=torch.float64)
w = torch.randn(4, 3, generator=g, dtype=torch.float64, requires_grad=True)

da = dt.distribute_tensor(a, mesh, [dt.Shard(0)])
db = dt.distribute_tensor(b, mesh, [dt.Replicate()])
dw = dt.distribute_tensor(w, mesh, [dt.Shard(1)])           # a leaf that requires grad, as w does
assert isinstance(da, torch.Tensor) and da.shape == a.shape and dw.requires_grad and dw.is_leaf

c = da @ db                                                  # operators
h = torch.relu(c) + torch.tanh(c) * 2 - F.gelu(c)            # torch functions
y = h @ dw
loss = (y ** 2).mean()
loss.backward()                                              # autograd from the leaf dw

ref_c = a @ b
ref_h = torch.relu(ref_c) + torch.tanh(ref_c) * 2 - F.gelu(ref_c)
w_ref = w.detach().clone().requires_grad_(True)
ref_loss = ((ref_h @ w_ref) ** 2).mean()
ref_loss.backward()
close(c.full_tensor(), ref_c, "a @ b")
close(y.full_tensor(), ref_h @ w_ref.detach(), "h @ w")
close(loss.full_tensor(), ref_loss.detach(), "loss")
close(dw.grad.full_tensor(), w_ref.grad, "w.grad")

r = c.redistribute(mesh, [dt.Replicate()])                   # redistribute, then the local block
close(r.to_local(), ref_c, "redistribute to Replicate")

# from_local: this rank's block, differentiable back to the block
local = torch.arange(6, dtype=torch.float64).reshape(2, 3) + 10 * rank
local.requires_grad_(True)
x = dt.DTensor.from_local(local, mesh, [dt.Shard(0)])
assert x.shape == (8, 3), x.shape
(x * x).sum().backward()
close(local.grad, 2 * local.detach(), "from_local gradient")
whole = torch.cat([torch.arange(6, dtype=torch.float64).reshape(2, 3) + 10 * i for i in range(4)])
close(x.full_tensor(), whole, "from_local full_tensor")

# nn.Parameter holding a DTensor: a column-parallel nn.Linear
torch.manual_seed(1)
lin = nn.Linear(6, 8, dtype=torch.float64)
ref_lin = nn.Linear(6, 8, dtype=torch.float64)
ref_lin.load_state_dict(lin.state_dict())
lin.weight = nn.Parameter(dt.distribute_tensor(lin.weight.detach(), mesh, [dt.Shard(0)]))
lin.bias = nn.Parameter(dt.distribute_tensor(lin.bias.detach(), mesh, [dt.Shard(0)]))
out = lin(da).sum()
out.backward()
ref_out = ref_lin(a).sum()
ref_out.backward()
close(out.full_tensor(), ref_out.detach(), "Linear forward")
close(lin.weight.grad.full_tensor(), ref_lin.weight.grad, "Linear weight grad")
close(lin.bias.grad.full_tensor(), ref_lin.bias.grad, "Linear bias grad")

# Factories: each rank makes its block of the global tensor
ones = dt.ones(10, 3, dtype=torch.float64, device_mesh=mesh, placements=[dt.Shard(0)])
filled = dt.full((10, 3), 0.5, dtype=torch.float64, device_mesh=mesh, placements=[dt.Shard(1)])
zeros = dt.zeros(10, 3, dtype=torch.float64, device_mesh=mesh)
close((ones + filled - zeros).full_tensor(), torch.full((10, 3), 1.5, dtype=torch.float64), "factories")
assert ones.to_local().shape == torch.chunk(torch.ones(10), 4)[rank].shape + (3,)

print("RESULT " + json.dumps({
    "rank": rank,
    "loss": loss.full_tensor().item(),
    "w_grad": dw.grad.full_tensor().flatten().tolist(),
    "linear": out.full_tensor().item(),
    "weight_placements": kinds(lin.weight.placements),
}), flush=True)
del da, db, dw, c, h, y, loss, r, x, lin
import dtensor  # noqa: E402  (both modules: torch's Gloo workers can abort a rank at teardown)
dtensor.exit_process()
