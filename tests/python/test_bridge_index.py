# Advanced indexing on bridge DTensors (aten.index.Tensor and aten.index_put, the bridge's own
# handlers in python/dtensor/torch_bridge.py): x[i], x[:, i], x[i, :, j] (indexed dims apart: the
# index dims go first), x[mask], and the gradient of each (torch's backward scatter-adds into zeros
# with index_put), x[i] = v and index_put_ with accumulate, on [2, 2] meshes with x sharded on an
# indexed dim, on a dim left alone (kept sharded), and Partial; indices plain or DTensors. Every
# value and gradient against torch on one device.
import pytest

import dtensor
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

X = torch.randn(6, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
I = torch.tensor([0, 5, 2, 2])
J = torch.tensor([[1, 3], [0, 3]])

CASES = {
    "x[i]": lambda x, i, j: x[i],
    "x[:, j]": lambda x, i, j: x[:, j],
    "x[i, :, i % 4]": lambda x, i, j: x[i, :, i % 4],
    "x[:, j, j]": lambda x, i, j: x[:, j, j],
    "x[x > 0.3]": lambda x, i, j: x[x > 0.3],
    "x[..., 2][i]": lambda x, i, j: x[..., 2][i],
}
PLACEMENTS = [[Shard(0), Shard(1)], [Shard(2), Replicate()], [Replicate(), Shard(1)]]


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("pl", range(len(PLACEMENTS)))
def test_index_forward_and_gradient_match_torch(case, pl):
    f = CASES[case]
    ref = X.clone().requires_grad_()
    want = f(ref, I, J)
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    (want * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        x = bridge.distribute(X.clone(), mesh, PLACEMENTS[pl]).requires_grad_()
        i = bridge.distribute(I, mesh, [Replicate(), Replicate()]) if pl == 1 else I  # DTensor indices too
        y = f(x, i, J)
        (y * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
        return y.full_tensor(), x.grad.full_tensor()

    for y, g in dtensor.run_threads(4, fn):
        torch.testing.assert_close(y, want.detach(), rtol=0, atol=0)
        torch.testing.assert_close(g, ref.grad, rtol=1e-15, atol=1e-15)


def test_index_keeps_shards_of_dims_left_alone_and_passes_partial():
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        x = bridge.distribute(X.clone(), mesh, [Shard(2), Shard(0)])
        a = x[:, J]  # dim 2 -> result dim 3 (kept); dim 0 -> result dim 0 (kept)
        b = x[I]     # dim 0 indexed: gathered; dim 2 -> result dim 2
        p = bridge.from_local(X.clone() * (mesh.get_rank() + 1), mesh, [Partial(), Partial()], shape=X.shape)
        c = p[I, 1]
        return (list(a.placements), list(b.placements), list(c.placements),
                a.full_tensor(), b.full_tensor(), c.full_tensor())

    for pa, pb, pc, a, b, c in dtensor.run_threads(4, fn):
        assert pa == [Shard(3), Shard(0)] and pb == [Shard(1 + 1), Replicate()] and pc == [Partial(), Partial()]
        torch.testing.assert_close(a, X[:, J], rtol=0, atol=0)
        torch.testing.assert_close(b, X[I], rtol=0, atol=0)
        torch.testing.assert_close(c, 10 * X[I, 1], rtol=1e-15, atol=0)


@pytest.mark.parametrize("pl", range(len(PLACEMENTS)))
def test_index_put_matches_torch(pl):
    v = torch.randn(4, 5, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    want = X.clone()
    want[I] = v  # repeated index 2: one of the writes wins, the same one on every device
    want_acc = X.clone().index_put_((I,), v, accumulate=True)
    want_col = X.clone()
    want_col[:, J] = 0.5

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        x = bridge.distribute(X.clone(), mesh, PLACEMENTS[pl])
        x[I] = bridge.distribute(v, mesh, [Shard(2), Replicate()])
        y = bridge.distribute(X.clone(), mesh, PLACEMENTS[pl]).index_put_((I,), v, accumulate=True)
        z = bridge.distribute(X.clone(), mesh, PLACEMENTS[pl])
        z[:, J] = 0.5
        return x.full_tensor(), y.full_tensor(), z.full_tensor(), list(x.placements)

    for x, y, z, placements in dtensor.run_threads(4, fn):
        assert placements == PLACEMENTS[pl]  # in place: x keeps its layout
        torch.testing.assert_close(y, want_acc, rtol=1e-15, atol=1e-15)
        torch.testing.assert_close(z, want_col, rtol=0, atol=0)
        # The repeated index: torch's CPU kernel writes in order, the last write wins, on every rank.
        torch.testing.assert_close(x, want, rtol=0, atol=0)


def test_too_many_indices_name_the_op():
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(X.clone(), mesh, [Shard(0)])
        with pytest.raises(IndexError, match=r"4 indices for a DTensor \[6, 5, 4\]"):
            torch.ops.aten.index.Tensor(x, [I, None, None, I])

    dtensor.run_threads(2, fn)


def test_weighted_shards_keep_their_shares():
    # S(0)[3:1] (a weighted data-parallel share) of a dim the indices leave alone moves with its
    # weights to the result dim, and index_put writes into it block by block.
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(X.clone(), mesh, [Shard(0, [3, 1])])
        y = x[:, J]
        x[:, I % 5] = 0.25
        return list(y.placements), y.full_tensor(), list(x.placements), x.full_tensor()

    want_x = X.clone()
    want_x[:, I % 5] = 0.25
    for py, y, px, x in dtensor.run_threads(2, fn):
        assert py == [Shard(0, [3, 1])] and px == [Shard(0, [3, 1])]
        torch.testing.assert_close(y, X[:, J], rtol=0, atol=0)
        torch.testing.assert_close(x, want_x, rtol=0, atol=0)
