# In-place writes into a bridge view whose block is not a view of its base's block (the view needed
# communication: a slice or select of a sharded dim, the diagonal of a sharded matrix, a view of a
# Partial tensor): the write goes on to the base (torch_bridge._write_to_base: torch's view replay
# on the base's element positions, index_put into the base's own blocks), where it was refused.
# Against torch on one device, on [2, 2] and [4] thread meshes (uneven shards): the base's and the
# view's values after fill_, zero_, copy_, add_ (a pointwise in-place op), mul_ with a tensor,
# through chains of views; a view that shares the base's blocks sees the write; and
# torch.linalg.householder_product's gradient, whose backward fills the diagonal of a sharded matrix.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

X = torch.arange(42, dtype=torch.float64).reshape(6, 7) / 8 - 2


def writes(t, other):
    """A sequence of writes into views of t (a torch tensor or a bridge tensor); other: a [6]
    tensor of the same kind."""
    t.diagonal().fill_(1.5)
    t[:, 3].zero_()
    t[1:5, 2:6].diagonal(offset=1).copy_(other[:3])
    t[4].add_(other[:7 - 1].sum())
    t.t()[2:5, 1:3].mul_(other[1:4].reshape(3, 1))
    return t


LAYOUTS = {
    "cols_both": ((2, 2), [Shard(1), Shard(1)]),
    "rows_cols": ((2, 2), [Shard(0), Shard(1)]),
    "rows_uneven_4": ((4,), [Shard(0)]),
    "partial_rows": ((2, 2), [Partial(), Shard(0)]),
    "partial_sum": ((2, 2), [Partial(), Replicate()]),  # views of its blocks, Partial like it
    "partial_max": ((2, 2), [Replicate(), Partial("max")]),
}


def placed(x, mesh, pl):
    """x laid out as pl; Partial pieces: sum -> x / 4 and 3 x / 4 along its mesh dim; max -> x on
    coordinate 0 of its mesh dim, x - 1 on the other."""
    if not any(p.is_partial() for p in pl):
        return bridge.distribute(x, mesh, pl)
    d = next(i for i, p in enumerate(pl) if p.is_partial())
    c = mesh.get_coordinate()[d]
    block = bridge.distribute(x, mesh, [Replicate() if p.is_partial() else p for p in pl]).to_local()
    piece = block * (2 * c + 1) / 4 if pl[d] == Partial() else block - c
    return bridge.from_local(piece, mesh, pl, shape=x.shape)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_writes_into_views_reach_the_tensor(layout):
    mesh_shape, pl = LAYOUTS[layout]
    other = torch.tensor([3.0, -1.0, 0.5, 2.0, 4.0, -2.5], dtype=torch.float64)
    want = writes(X.clone(), other)

    def fn(world):
        mesh = dt.init_device_mesh("cpu", mesh_shape)
        t = placed(X, mesh, pl)
        sibling = t.t()  # a view whose blocks are views of t's blocks
        o = bridge.distribute(other, mesh, [Shard(0)] + [Replicate()] * (len(mesh_shape) - 1))
        writes(t, o)
        diag = t.diagonal()
        return t.full_tensor(), diag.full_tensor(), sibling.full_tensor()

    for got, diag, sibling in dt.run_threads(4, fn):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(diag, want.diagonal(), rtol=0, atol=0)
        torch.testing.assert_close(sibling, want.t(), rtol=0, atol=0)


@pytest.mark.parametrize("pl", [[Shard(1), Shard(1)], [Shard(0), Partial()], [Shard(2), Replicate()],
                                [Partial("max"), Shard(0)]])
def test_householder_product_gradient_matches_torch(pl):
    g = torch.Generator().manual_seed(4)
    a = torch.randn(2, 6, 4, dtype=torch.float64, generator=g)
    tau = torch.rand(2, 4, dtype=torch.float64, generator=g) + 0.5
    w = torch.randn(2, 6, 4, dtype=torch.float64, generator=g)
    ar, tr = a.clone().requires_grad_(), tau.clone().requires_grad_()
    want = torch.linalg.householder_product(ar, tr)
    (want * w).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        ai = placed(a, mesh, pl).requires_grad_()
        ti = bridge.distribute(tau, mesh, [Replicate(), Shard(1)]).requires_grad_()
        out = torch.linalg.householder_product(ai, ti)
        (out * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
        return out.full_tensor(), ai.grad.full_tensor(), ti.grad.full_tensor()

    for out, ga, gt in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(ga, ar.grad, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(gt, tr.grad, rtol=1e-10, atol=1e-10)
