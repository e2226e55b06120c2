# The bridge's paths for ATen calls that dtensor's ops do not take as they are, each against torch
# on one device (reproducers of what tests/python/test_opdb.py found): a Python number beside a
# Partial tensor, in-place view ops (matmul's 1-d cases squeeze_ their result), pointwise ops with
# no dtensor op (run on the blocks under the pointwise rule), keyword arguments dtensor's op lacks
# (sum's dtype, round's decimals), max(x) / min(x) of a whole tensor.
import pytest

import dtensor
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

G = torch.Generator().manual_seed(5)
X = torch.randn(6, 5, dtype=torch.float64, generator=G)
V = torch.randn(6, dtype=torch.float64, generator=G)
B = torch.randn(6, 1, dtype=torch.float64, generator=G)


def on_mesh(fn, shape=(2, 2)):
    n = 1
    for s in shape:
        n *= s
    return dtensor.run_threads(n, lambda w: fn(dtensor.init_device_mesh("cpu", shape)))


def test_a_number_beside_a_partial_tensor_counts_once():
    # add(P, 1) may run as P(sum): the 1 must then be on one rank only (it was on every rank: 2.7).
    def fn(mesh):
        r = mesh.get_rank()
        x = bridge.from_local(torch.tensor(0.7 - 1.5 * r, dtype=torch.float64), mesh, [Partial("max")], shape=())
        return (x + 1.0).full_tensor().item(), (1.0 - x).full_tensor().item(), (x * 2.0).full_tensor().item()

    for got in on_mesh(fn, (2,)):
        assert got == pytest.approx((1.7, 0.3, 1.4), abs=1e-15)


@pytest.mark.parametrize("pl", [[Shard(0), Replicate()], [Replicate(), Shard(1)], [Partial(), Shard(0)]])
def test_vector_matrix_products_squeeze_in_place(pl):
    # matmul(v, m) is unsqueeze(0).mm(m).squeeze_(0) in ATen: the in-place view must change the shape.
    def fn(mesh):
        m = bridge.distribute(X, mesh, [Shard(0), Replicate()])
        v = bridge.distribute(V, mesh, pl[:1] + [Replicate()]) if pl[0].is_shard() else bridge.distribute(V, mesh)
        y = v @ m
        z = (m.t() @ v)
        w = bridge.distribute(X.clone(), mesh, pl if pl[0].is_replicate() else [Replicate(), Replicate()])
        w.t_()
        return y.shape, y.full_tensor(), z.full_tensor(), w.shape, w.full_tensor()

    for ys, y, z, ws, w in on_mesh(fn):
        assert ys == (5,) and ws == (5, 6)
        torch.testing.assert_close(y, V @ X, rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(z, X.t() @ V, rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(w, X.t(), rtol=0, atol=0)


def test_pointwise_ops_without_a_dtensor_op_run_on_the_blocks():
    # torch.special.i0e and xlog1py have no dtensor op: torch's kernel on the blocks, the sharded dim
    # kept, a broadcast operand replicated, a Partial operand reduced first (i0e of a sum of pieces).
    def fn(mesh):
        r = mesh.get_rank()
        x = bridge.distribute(X, mesh, [Shard(0), Shard(1)])
        b = bridge.distribute(B, mesh, [Shard(0), Replicate()])
        p = bridge.from_local(X / 4 + (r - 1.5), mesh, [Partial(), Partial()], shape=X.shape)
        y = torch.special.i0e(x)
        z = torch.special.xlog1py(x, b.abs())
        q = torch.special.i0e(p)
        return y.placements, y.full_tensor(), z.full_tensor(), q.full_tensor()

    for pl, y, z, q in on_mesh(fn):
        assert pl == (Shard(0), Shard(1))
        torch.testing.assert_close(y, torch.special.i0e(X), rtol=1e-14, atol=0)
        torch.testing.assert_close(z, torch.special.xlog1py(X, B.abs()), rtol=1e-14, atol=1e-15)
        torch.testing.assert_close(q, torch.special.i0e(X), rtol=1e-13, atol=0)


def test_keyword_arguments_dtensor_ops_lack():
    x32 = X.float()

    def fn(mesh):
        x = bridge.distribute(x32, mesh, [Shard(0), Shard(1)])
        s = torch.sum(x, dim=0, dtype=torch.float64)
        m = torch.mean(x, dtype=torch.float64)
        r = torch.round(bridge.distribute(X * 10, mesh, [Shard(1), Replicate()]), decimals=2)
        return s.dtype, s.full_tensor(), m.full_tensor(), r.full_tensor()

    for dt, s, m, r in on_mesh(fn):
        assert dt == torch.float64
        torch.testing.assert_close(s, torch.sum(x32, dim=0, dtype=torch.float64), rtol=1e-15, atol=1e-15)
        torch.testing.assert_close(m, torch.mean(x32, dtype=torch.float64), rtol=1e-15, atol=1e-15)
        torch.testing.assert_close(r, torch.round(X * 10, decimals=2), rtol=0, atol=0)


def test_max_and_min_of_a_whole_tensor():
    x = X.clone()
    x[3, 2] = 9.0

    def fn(mesh):
        d = bridge.distribute(x, mesh, [Shard(0), Shard(1)])
        return torch.max(d).full_tensor(), torch.min(d).full_tensor()

    for mx, mn in on_mesh(fn):
        assert mx.item() == 9.0 and mn.item() == x.min().item()


def test_writes_into_a_view_reach_the_tensor():
    def fn(mesh):
        x = bridge.distribute(X[:5].clone(), mesh, [Shard(0), Replicate()])
        x[:, 1].fill_(3.0)  # a local view of each block: the write reaches x
        x.select(1, 2).copy_(bridge.distribute(torch.arange(5.0, dtype=torch.float64), mesh, [Shard(0), Replicate()]))
        y = bridge.distribute(X[:5, :5].clone(), mesh, [Shard(1), Shard(1)])
        # the diagonal of a column-sharded matrix is not a view of any block: written on to y
        # (torch_bridge._write_to_base; tests/python/test_bridge_view_writes.py)
        y.diagonal().fill_(1.0)
        return x.full_tensor(), y.full_tensor()

    want = X[:5].clone()
    want[:, 1] = 3.0
    want[:, 2] = torch.arange(5.0, dtype=torch.float64)
    want_y = X[:5, :5].clone()
    want_y.diagonal().fill_(1.0)
    for got, got_y in on_mesh(fn):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(got_y, want_y, rtol=0, atol=0)


def test_linear_algebra_shards_the_batch_dim():
    a = torch.randn(4, 3, 3, dtype=torch.float64, generator=G) + 3 * torch.eye(3, dtype=torch.float64)

    def fn(mesh):
        d = bridge.distribute(a, mesh, [Shard(0), Shard(1)])
        inv = torch.linalg.inv(d)
        single = torch.linalg.inv(bridge.distribute(a[0], mesh, [Shard(1), Replicate()]))
        q, r = torch.linalg.qr(d)
        return inv.placements, inv.full_tensor(), single.full_tensor(), (q @ r).full_tensor()

    for pl, inv, single, qr in on_mesh(fn):
        assert pl == (Shard(0), Replicate())  # the batch dim keeps its shard, each matrix whole
        torch.testing.assert_close(inv, torch.linalg.inv(a), rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(single, torch.linalg.inv(a[0]), rtol=1e-12, atol=1e-13)
        torch.testing.assert_close(qr, a, rtol=1e-12, atol=1e-12)


def test_data_dependent_shapes_are_computed_whole_and_replicated():
    x = X.clone()
    x[x.abs() < 0.5] = 0.0

    def fn(mesh):
        d = bridge.distribute(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        sel = torch.masked_select(d, d > 0)
        nz = torch.nonzero(d)
        u = torch.unique(bridge.distribute(torch.tensor([3, 1, 3, 2, 1]), mesh, [Shard(0), Replicate()]))
        g, = torch.autograd.grad(sel.sum() * 2, [d])  # masked_scatter's gradient path
        return sel.placements, sel.full_tensor(), nz.full_tensor(), u.full_tensor(), g.full_tensor()

    for pl, sel, nz, u, g in on_mesh(fn):
        assert pl == (Replicate(), Replicate())
        torch.testing.assert_close(sel, torch.masked_select(x, x > 0), rtol=0, atol=0)
        assert torch.equal(nz, torch.nonzero(x)) and torch.equal(u, torch.tensor([1, 2, 3]))
        torch.testing.assert_close(g, 2.0 * (x > 0).double(), rtol=0, atol=0)


def test_diagonal_scatter_with_a_sharded_matrix_and_its_gradient():
    a = X[:, :5].reshape(2, 3, 5)
    src = torch.randn(2, 3, dtype=torch.float64, generator=G)
    ra, rs = a.clone().requires_grad_(), src.clone().requires_grad_()
    want = torch.diagonal_scatter(ra, rs, 1, 1, 2)
    w = torch.randn(want.shape, dtype=torch.float64, generator=G)
    ga, gs = torch.autograd.grad((want * w).sum(), [ra, rs])

    def fn(mesh):
        x = bridge.distribute(a, mesh, [Shard(0), Shard(2)]).requires_grad_()
        s = bridge.distribute(src, mesh, [Shard(0), Replicate()]).requires_grad_()
        y = torch.diagonal_scatter(x, s, 1, 1, 2)
        gx, gsrc = torch.autograd.grad((y * bridge.distribute(w, mesh)).sum(), [x, s])
        return y.full_tensor(), gx.full_tensor(), gsrc.full_tensor()

    for y, gx, gsrc in on_mesh(fn):
        torch.testing.assert_close(y, want.detach(), rtol=0, atol=0)
        torch.testing.assert_close(gx, ga, rtol=0, atol=0)
        torch.testing.assert_close(gsrc, gs, rtol=0, atol=0)


@pytest.mark.parametrize("pl", [[Shard(1), Shard(1)], [Shard(0), Shard(2)], [Shard(0), Shard(1)]])
def test_resampling_ops_keep_samples_and_channels_sharded(pl):
    # upsample_linear1d and adaptive_max_pool2d (and backward) have no dtensor op: N and C keep their
    # Shards. Channels 3 over [2, 2] give some ranks no channel at all: they must not call the kernel
    # alone (it raised there and the other ranks waited in the next collective until the timeout).
    import torch.nn.functional as F
    x = torch.randn(2, 3, 4, 6, dtype=torch.float64, generator=G)
    w = torch.randn(2, 3, 4, 12, dtype=torch.float64, generator=G)
    rx = x.clone().requires_grad_()
    want = F.interpolate(rx.flatten(2), scale_factor=2, mode="linear").unflatten(2, (4, 12))
    pooled = F.adaptive_max_pool2d(rx, (3, 4))
    (gx,) = torch.autograd.grad((want * w).sum() + pooled.sum(), [rx])

    def fn(mesh):
        d = bridge.distribute(x, mesh, pl).requires_grad_()
        y = F.interpolate(d.flatten(2), scale_factor=2, mode="linear").unflatten(2, (4, 12))
        p = F.adaptive_max_pool2d(d, (3, 4))
        g, = torch.autograd.grad((y * bridge.distribute(w, mesh)).sum() + p.sum(), [d])
        return y.full_tensor(), p.full_tensor(), g.full_tensor()

    for y, p, g in on_mesh(fn):
        torch.testing.assert_close(y, want.detach(), rtol=1e-14, atol=1e-14)
        torch.testing.assert_close(p, pooled.detach(), rtol=0, atol=0)
        torch.testing.assert_close(g, gx, rtol=1e-14, atol=1e-14)
