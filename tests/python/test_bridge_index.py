# Advanced indexing on bridge DTensors (aten.index.Tensor and aten.index_put, the registered ops of
# ops/indexing/advanced_defs.cc; the bridge's handlers only expand bool masks): x[i], x[:, i], x[i, :, j] (indexed dims apart: the
# index dims go first), x[mask], and the gradient of each (torch's backward scatter-adds into zeros
# with index_put), x[i] = v and index_put_ with accumulate, on [2, 2] meshes with x sharded on an
# indexed dim, on a dim left alone (kept sharded), and Partial; indices plain or DTensors. Every
# value and gradient against torch on one device.
import pytest

import dtensor
from dtensor import DTensorError, Partial, Replicate, Shard

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
        # b: dim 0 indexed and sharded: each rank looks up the indices it holds (Partial, no gather).
        assert pa == [Shard(3), Shard(0)] and pb == [Shard(1 + 1), Partial()] and pc == [Partial(), Partial()], (pa, pb, pc)
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
        with pytest.raises(DTensorError, match=r"index.Tensor: 4 indices for self \[6, 5, 4\]; accepted: at most 3"):
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


# ---- the registered ops index.Tensor / index_put (ops/indexing/advanced_defs.cc) on [2, 2] and [4]
# meshes: every placement family of x (Shard on an indexed dim, on a dim left alone, Replicate,
# Partial with random pieces), indices int64/int32, negative, broadcast, adjacent or apart, and
# sharded DTensors; values and gradients against torch on one device.

MESHES = {(2, 2): [[Shard(0), Shard(1)], [Shard(2), Shard(0)], [Partial(), Shard(2)], [Replicate(), Replicate()]],
          (4,): [[Shard(0)], [Shard(1)], [Shard(2)], [Partial()]]}
NEG = torch.tensor([-1, 3, -6, 0])               # negative indices count from the end (dim 0: 6)
I32 = torch.tensor([[4, -5], [0, 2]], dtype=torch.int32)
KEYS = {
    "x[neg]": lambda x, a, b: x[a],
    "x[:, i32]": lambda x, a, b: x[:, b],
    "x[neg, :, i32 % 4]": lambda x, a, b: x[a.reshape(2, 2), :, b % 4],   # apart: B [2, 2] first
    "x[:, i32, neg % 4]": lambda x, a, b: x[:, b, (a % 4)[:2]],           # adjacent, broadcast [2, 2]
    "x[neg, i32 % 5]": lambda x, a, b: x[a[:2], b % 5],
}


def _pieces(t, mesh, mesh_shape, placements, seed):
    """A DTensor with `placements` whose Partial(sum) pieces are random (they add up to t)."""
    if not any(p.is_partial() for p in placements):
        return bridge.distribute(t.clone(), mesh, placements)
    base = [Replicate() if p.is_partial() else p for p in placements]
    block = bridge.distribute(t.clone(), mesh, base).to_local()
    n = 1
    for i, p in enumerate(placements):
        if p.is_partial():
            n *= mesh_shape[i]
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(block.shape, dtype=block.dtype, generator=g)  # the same on every rank...
    coord = mesh.get_coordinate()
    first = all(coord[i] == 0 for i, p in enumerate(placements) if p.is_partial())
    # ...so the pieces are block/n + noise * (n - 1) on the first rank, block/n - noise elsewhere.
    local = block / n + noise * ((n - 1) if first else -1)
    return bridge.from_local(local, mesh, placements, shape=t.shape)


@pytest.mark.parametrize("mesh_shape", list(MESHES))
@pytest.mark.parametrize("key", list(KEYS))
def test_registered_index_matches_torch(mesh_shape, key):
    f = KEYS[key]
    ref = X.clone().requires_grad_()
    want = f(ref, NEG, I32)
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    (want * w).sum().backward()
    n = 1
    for s in mesh_shape:
        n *= s

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        out = []
        for k, pl in enumerate(MESHES[mesh_shape]):
            x = _pieces(X, mesh, mesh_shape, pl, 10 + k).requires_grad_()
            y = f(x, NEG, I32)
            (y * bridge.distribute(w, mesh, [Replicate()] * len(mesh_shape))).sum().backward()
            out.append((pl, y.full_tensor(), x.grad.full_tensor()))
        return out

    for rank_out in dtensor.run_threads(n, fn):
        for pl, y, g in rank_out:
            torch.testing.assert_close(y, want.detach(), rtol=1e-12, atol=1e-12, msg=f"{key} {pl}")
            torch.testing.assert_close(g, ref.grad, rtol=1e-12, atol=1e-12, msg=f"{key} {pl} grad")


def test_sharded_lookup_gives_partial_and_dims_left_alone_keep_their_shards():
    # x S(0) indexed along dim 0: each rank looks up the indices it holds, a Partial(sum) piece (no
    # gather of x); dim 2 sharded and left alone moves to its result dim (2 for x[neg], 1 for the
    # apart key, whose B [2, 2] goes first); a sharded index shards the result along B.
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        x = bridge.distribute(X.clone(), mesh, [Shard(0), Shard(2)])
        a = x[NEG]
        b = torch.ops.aten.index.Tensor(bridge.distribute(X.clone(), mesh, [Replicate(), Shard(2)]),
                                        [NEG.reshape(2, 2), None, None])
        i = bridge.distribute(NEG, mesh, [Shard(0), Replicate()])
        c = bridge.distribute(X.clone(), mesh, [Replicate(), Replicate()])[i]
        return [list(t.placements) for t in (a, b, c)], [t.full_tensor() for t in (a, b, c)]

    for pls, (a, b, c) in dtensor.run_threads(4, fn):
        assert pls == [[Partial(), Shard(2)], [Replicate(), Shard(3)], [Shard(0), Replicate()]], pls
        torch.testing.assert_close(a, X[NEG], rtol=0, atol=0)
        torch.testing.assert_close(b, X[NEG.reshape(2, 2)], rtol=0, atol=0)
        torch.testing.assert_close(c, X[NEG], rtol=0, atol=0)


PUT_CASES = {  # (indices, values shape, accumulate): distinct positions unless accumulate
    "x[neg] = v": ([NEG], (4, 5, 4), False),
    "x[neg] += v (broadcast)": ([torch.tensor([1, -5, 1, 2])], (5, 1), True),
    "x[:, i32, k] += v": ([None, I32, torch.tensor([3, -1])], (6, 2, 2), True),
    "x[i, :, k] = v (apart)": ([torch.tensor([0, 5, -3]), None, torch.tensor([1, 1, 2])], (3, 5), False),
}


@pytest.mark.parametrize("mesh_shape", list(MESHES))
@pytest.mark.parametrize("case", list(PUT_CASES))
def test_registered_index_put_matches_torch(mesh_shape, case):
    indices, vshape, acc = PUT_CASES[case]
    V = torch.randn(vshape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref_x, ref_v = X.clone().requires_grad_(), V.clone().requires_grad_()
    want = torch.ops.aten.index_put(ref_x, indices, ref_v, acc)
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    (want * w).sum().backward()
    n = 1
    for s in mesh_shape:
        n *= s
    v_layouts = {(2, 2): [[Replicate(), Replicate()], [Shard(0), Replicate()], [Partial(), Replicate()],
                          [Replicate(), Replicate()]],
                 (4,): [[Replicate()], [Shard(len(vshape) - 1)], [Replicate()], [Partial()]]}[mesh_shape]

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        out = []
        for k, (pl, vpl) in enumerate(zip(MESHES[mesh_shape], v_layouts)):
            x = _pieces(X, mesh, mesh_shape, pl, 20 + k).requires_grad_()
            v = _pieces(V, mesh, mesh_shape, vpl, 30 + k).requires_grad_()
            y = torch.ops.aten.index_put(x, indices, v, acc)
            (y * bridge.distribute(w, mesh, [Replicate()] * len(mesh_shape))).sum().backward()
            out.append((pl, vpl, y.full_tensor(), x.grad.full_tensor(), v.grad.full_tensor()))
        return out

    for rank_out in dtensor.run_threads(n, fn):
        for pl, vpl, y, gx, gv in rank_out:
            where = f"{case} x {pl} values {vpl}"
            torch.testing.assert_close(y, want.detach(), rtol=1e-12, atol=1e-12, msg=where)
            torch.testing.assert_close(gx, ref_x.grad, rtol=1e-12, atol=1e-12, msg=where + " x grad")
            torch.testing.assert_close(gv, ref_v.grad, rtol=1e-12, atol=1e-12, msg=where + " values grad")


def test_index_put_into_a_plain_tensor_counts_it_as_replicated():
    # trace's backward: index_put(zeros (a plain tensor), indices, grad (a DTensor)).
    want = torch.zeros(6, 5, dtype=torch.float64).index_put_((torch.tensor([0, 2]),), X[:2, :, 0])

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        v = bridge.distribute(X[:2, :, 0].clone(), mesh, [Shard(1), Replicate()])
        y = torch.ops.aten.index_put(torch.zeros(6, 5, dtype=torch.float64), [torch.tensor([0, 2])], v)
        return type(y).__name__, y.full_tensor()

    for kind, y in dtensor.run_threads(4, fn):
        assert kind == "DTensor"
        torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.parametrize("op", ["index", "index_put"])
def test_out_of_range_index_names_the_op_the_index_and_the_size(op):
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(X.clone(), mesh, [Shard(0)])
        bad = [None, torch.tensor([1, 5])]
        with pytest.raises(DTensorError, match=rf"{op}.*index 5 is out of range for dim 1 of size 5"):
            if op == "index":
                torch.ops.aten.index.Tensor(x, bad)
            else:
                torch.ops.aten.index_put(x, bad, torch.tensor(1.0, dtype=torch.float64))

    dtensor.run_threads(2, fn)


def test_registered_ops_refuse_a_mask_and_a_none_in_a_tensor_list():
    # The op itself refuses a bool mask (data-dependent positions; the bridge expands it first), and
    # a None entry where the schema says Tensor[] (cat) is an error naming the op.
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = dtensor.distribute_tensor(X.numpy(), mesh, [Shard(1)])
        m = dtensor.distribute_tensor((X[:, 0, 0] > 0).numpy(), mesh, [Replicate()])
        with pytest.raises(DTensorError, match=r"index.Tensor.*index 0 is a bool mask"):
            dtensor.ops.call("index.Tensor", x, [m])
        with pytest.raises(DTensorError, match=r"cat: argument 'tensors' entry 1 is None"):
            dtensor.ops.call("cat", [x, None])

    dtensor.run_threads(2, fn)
