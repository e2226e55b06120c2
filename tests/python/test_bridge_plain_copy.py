# copy_ of a plain torch tensor into a bridge tensor (torch_bridge._copy_): the plain source is the
# same on every rank (plain tensors mixed with bridge tensors are replicated, docs/PYTHON.md),
# broadcast to the destination's shape, then laid out as the destination. ATen's own kernels make
# such sources: linalg.matrix_power(x, 0) copies a plain eye into a clone of x (it was refused).
# Against torch on one device, on a [2, 2] thread mesh: the destination sharded (unevenly), Partial
# sum and max, a broadcast source; matrix_power for n = 0, 1, 3, -2 with its gradient.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

LAYOUTS = {  # a [3, 3, 3] batch of matrices on a [2, 2] mesh
    "replicated": [Replicate(), Replicate()],
    "batch": [Shard(0), Replicate()],
    "rows_cols": [Shard(1), Shard(2)],
    "partial_sum": [Partial("sum"), Shard(0)],
    "partial_max": [Partial("max"), Partial("max")],
}


def placed(x, mesh, pl):
    """x laid out as pl; a Partial's pieces: sum -> x / 4 and 3 x / 4 on mesh dim 0; max -> x on
    rank (0, 0), x - 1 elsewhere."""
    if not any(p.is_partial() for p in pl):
        return bridge.distribute(x, mesh, pl)
    c = mesh.get_coordinate()
    if pl[0] == Partial("sum"):
        block = bridge.distribute(x, mesh, [Replicate(), pl[1]]).to_local()
        return bridge.from_local(block * (2 * c[0] + 1) / 4, mesh, pl, shape=x.shape)
    return bridge.from_local(x if c == [0, 0] else x - 1, mesh, pl, shape=x.shape)


def x_of(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 3, 3, dtype=torch.float64, generator=g) + 3 * torch.eye(3, dtype=torch.float64)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("src_shape", [(3, 3, 3), (3,), (3, 1)])
def test_copy_of_a_plain_source_matches_torch(layout, src_shape):
    x = x_of(1)
    src = torch.arange(torch.Size(src_shape).numel(), dtype=torch.float64).reshape(src_shape) - 4
    want = x.clone().copy_(src)

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        d = aten_clone(placed(x, mesh, LAYOUTS[layout]))
        d.copy_(src)
        return d.full_tensor()

    for got in dt.run_threads(4, fn):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def aten_clone(d):
    return torch.ops.aten.clone.default(d)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("n", [0, 1, 3, -2])
def test_matrix_power_matches_torch(layout, n):
    x = x_of(2 + n)
    w = torch.randn(3, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    xr = x.clone().requires_grad_()
    want = torch.linalg.matrix_power(xr, n)
    (want * w).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xi = placed(x, mesh, LAYOUTS[layout]).requires_grad_()
        out = torch.linalg.matrix_power(xi, n)
        (out * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
        g = xi.grad
        return out.full_tensor(), None if g is None else g.full_tensor()

    for out, g in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(torch.zeros_like(x) if g is None else g, xr.grad, rtol=1e-10, atol=1e-10)
