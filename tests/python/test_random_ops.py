# Random ops with DTensor semantics (ops/random, kernels/cpu/random.h): on any layout, over [4] and
# [2,2] meshes, each rank's block is exactly the slice one device draws for the whole tensor with the
# same seed and offset; replicas draw identical values; the values have the right distribution
# (Kolmogorov-Smirnov, chi-square); the bridge's dropout, bernoulli_, rand_like and randn_like use it.
import math

import numpy as np
import pytest

import dtensor
from dtensor import Partial, Replicate, Shard

SHAPE = (7, 10)  # 7 rows: uneven over 2 and 4 ranks


def on_mesh(shape, fn):
    n = int(np.prod(shape))
    return dtensor.run_threads(n, lambda w: fn(dtensor.init_device_mesh("cpu", shape), w.rank))


def draw(name, x):
    """The op's output for input x (a DTensor), with fixed seed and offset (both beyond 32 bits)."""
    seed, offset = -(1 << 40) + 17, (1 << 33) + 5
    if name == "rand":
        return dtensor.ops.philox_rand_like(x, seed, offset), None
    if name == "randn":
        return dtensor.ops.philox_randn_like(x, seed, offset), None
    if name == "bernoulli":
        return dtensor.ops.philox_bernoulli(x, 0.3, seed, offset), None
    out, mask = dtensor.ops.call("philox_dropout", x, 0.4, seed, offset)
    return out, mask


X = np.random.default_rng(3).standard_normal(SHAPE).astype(np.float32) + 2.0  # no zeros


def one_device(name):
    def fn(mesh, rank):
        out, mask = draw(name, dtensor.distribute_tensor(X, mesh, [Replicate()]))
        return out.full_tensor(), None if mask is None else mask.full_tensor()
    return on_mesh((1,), fn)[0]


@pytest.mark.parametrize("name", ["rand", "randn", "bernoulli", "dropout"])
@pytest.mark.parametrize("mesh,placements", [
    ((4,), [Shard(0)]), ((4,), [Shard(1)]), ((4,), [Replicate()]),
    ((2, 2), [Shard(0), Shard(1)]), ((2, 2), [Shard(1), Shard(0)]), ((2, 2), [Replicate(), Shard(0)]),
    ((2, 2), [Shard(0), Shard(0)])])
def test_each_block_is_its_slice_of_one_devices_draw(name, mesh, placements):
    want, want_mask = one_device(name)
    assert np.unique(want).size > 2 or name in ("bernoulli",)  # a real draw, not a constant

    def fn(m, rank):
        x = dtensor.distribute_tensor(X, m, placements)
        out, mask = draw(name, x)
        assert list(out.placements) == placements  # drawn in place: no collective, no move
        return out.to_local(), out.full_tensor(), None if mask is None else mask.full_tensor()

    ranks = on_mesh(mesh, fn)
    for local, full, mask in ranks:
        np.testing.assert_array_equal(full, want)
        if mask is not None:
            np.testing.assert_array_equal(mask, want_mask)
            np.testing.assert_allclose(full, X * want_mask / 0.6, rtol=1e-6)
    if all(p == Replicate() for p in placements):  # replicas: identical values on every rank
        for local, _, _ in ranks:
            np.testing.assert_array_equal(local, ranks[0][0])
    else:  # the shards differ from each other: each drew its own slice
        assert not all(np.array_equal(ranks[0][0], r[0]) for r in ranks[1:])


def test_a_partial_input_draws_a_replicate_and_dropout_keeps_it_partial():
    want, want_mask = one_device("dropout")
    want_rand, _ = one_device("rand")

    def fn(m, rank):
        x = dtensor.distribute_tensor(X, m, [Partial()])
        r, _ = draw("rand", x)
        out, mask = draw("dropout", x)
        return list(r.placements), r.full_tensor(), list(out.placements), out.full_tensor(), mask.full_tensor()

    for rp, r, op, out, mask in on_mesh((4,), fn):
        assert rp == [Replicate()] and op == [Partial()]
        np.testing.assert_array_equal(r, want_rand)
        np.testing.assert_array_equal(mask, want_mask)
        np.testing.assert_allclose(out, want, rtol=1e-6)


def ks(x, cdf):
    x = np.sort(np.asarray(x, dtype=np.float64).ravel())
    n = x.size
    f = np.array([cdf(v) for v in x])
    return max(np.max(f - np.arange(n) / n), np.max(np.arange(1, n + 1) / n - f))


def test_distributions_of_a_sharded_draw():
    # Drawn on [2, 2] with uneven shards, assembled, then tested as one sample.
    shape = (201, 99)
    base = np.zeros(shape, np.float64)

    def fn(m, rank):
        x = dtensor.distribute_tensor(base, m, [Shard(0), Shard(1)])
        return (dtensor.ops.philox_rand_like(x, 7, 0).full_tensor(), dtensor.ops.philox_randn_like(x, 7, 1).full_tensor(),
                dtensor.ops.philox_bernoulli(x, 0.2, 7, 2).full_tensor())

    u, z, b = on_mesh((2, 2), fn)[0]
    n = u.size
    critical = 1.95 / math.sqrt(n)  # 0.1% level
    assert 0 <= u.min() and u.max() < 1
    assert ks(u, lambda v: v) < critical
    assert ks(z, lambda v: 0.5 * math.erfc(-v / math.sqrt(2))) < critical
    ones = float(b.sum())
    assert (ones - 0.2 * n) ** 2 / (0.2 * 0.8 * n) < 10.83  # chi-square, 1 dof, 0.1% level
    # Three calls with different offsets: no two equal.
    assert not np.array_equal(u, z) and not np.array_equal(u > 0.5, b > 0)


def test_errors_name_the_op():
    def fn(m, rank):
        x = dtensor.distribute_tensor(X, m, [Shard(0)])
        with pytest.raises(dtensor.DTensorError, match=r"philox_bernoulli.*p = 1.5.*\[0, 1\]"):
            dtensor.ops.philox_bernoulli(x, 1.5, 1, 0)
        with pytest.raises(dtensor.DTensorError, match=r"philox_rand_like.*int64.*accepted: float32"):
            dtensor.ops.philox_rand_like(x, 1, 0, dtype="int64")
        ints = dtensor.distribute_tensor(np.arange(14).reshape(7, 2), m, [Shard(0)])
        with pytest.raises(dtensor.DTensorError, match=r"philox_dropout.*input must be floating, got int64"):
            dtensor.ops.call("philox_dropout", ints, 0.5, 1, 0)
        mask = dtensor.distribute_tensor(np.ones((7, 3), bool), m, [Shard(0)])
        with pytest.raises(dtensor.DTensorError, match=r"native_dropout_backward.*mask"):
            dtensor.ops.native_dropout_backward(x, mask, 2.0)
        return True

    assert all(on_mesh((2,), fn))


def test_bridge_random_ops_on_sharded_tensors_match_one_device():
    torch = pytest.importorskip("torch")
    from dtensor import bridge

    def run(mesh_shape, placements):
        def fn(mesh):
            torch.manual_seed(1234)
            x = bridge.distribute(torch.zeros(9, 6, dtype=torch.float64), mesh, placements)
            r, n = torch.rand_like(x), torch.randn_like(x)
            d = torch.nn.functional.dropout(x + 1, 0.5, training=True)
            return [tuple(t.placements) for t in (r, n)], [t.full_tensor().detach() for t in (r, n, d)]

        n = int(np.prod(mesh_shape))
        return dtensor.run_threads(n, lambda w: fn(dtensor.init_device_mesh("cpu", mesh_shape)))

    (_, want), = run((1,), [Replicate()])
    for mesh_shape, placements in (((2,), [Shard(0)]), ((2, 2), [Shard(1), Shard(0)]), ((2,), [Replicate()])):
        for got_placements, got in run(mesh_shape, placements):
            assert all(p == tuple(placements) for p in got_placements)
            for g, w in zip(got, want):
                assert torch.equal(g, w), (mesh_shape, placements)
