# The pointwise rows with Scalar parameters (ops/pointwise/rows.h, DT_POINTWISE_PARAM_ROWS): what the
# OpInfo oracle does not reach. The parameter checks torch makes are errors naming the op and the
# parameters; None and explicit NaN are told apart; torch's dtype promotion by Python numbers; and
# Partial(max) passing through a monotone row (clamp) without a reduction while a non-monotone one
# (leaky_relu) reduces first, both equal to numpy on the whole tensor. Values and gradients against
# torch: tests/python/test_opinfo.py (clamp, nn.functional.hardtanh, ...).
import numpy as np
import pytest

import dtensor
from dtensor import Partial, Replicate, Shard

X = np.random.default_rng(5).uniform(-3, 3, (6, 5)).astype(np.float32)


def one_rank(fn):
    return dtensor.run_threads(1, lambda w: fn(dtensor.init_device_mesh("cpu", (1,))))[0]


def call(name, x, *args, **kwargs):
    def fn(mesh):
        return dtensor.ops.call(name, dtensor.distribute_tensor(x, mesh, [Replicate()]), *args, **kwargs).full_tensor()
    return one_rank(fn)


@pytest.mark.parametrize("name,args,kwargs,says", [
    ("hardtanh", (1.0, 0.0), {}, "p0 <= p1"),
    ("softshrink", (-0.5,), {}, "p0 >= 0.0"),
    ("celu", (0.0,), {}, "p0 != 0.0"),
    ("clamp", (), {}, "std::isnan(p0) && std::isnan(p1)"),
    ("clamp", (float("nan"), 1.0), {}, "min=nan is not supported"),
    ("leaky_relu", (0.1,), {"bogus": 1}, "bogus"),
])
def test_parameters_torch_refuses_are_errors_naming_them(name, args, kwargs, says):
    with pytest.raises(dtensor.DTensorError) as e:
        call(name, X, *args, **kwargs)
    assert name in str(e.value) and says in str(e.value), str(e.value)


def test_integer_input_dtype_follows_python_number_promotion():
    i = np.array([[-3, 0, 2, 5]], dtype=np.int64)
    got = call("clamp", i, 1, 3)
    assert got.dtype == np.int64 and got.tolist() == [[1, 1, 2, 3]]
    got = call("clamp", i, 0.5)  # a float bound on an int tensor: float32, as torch.clamp
    assert got.dtype == np.float32 and got.tolist() == [[0.5, 0.5, 2.0, 5.0]]
    got = call("clamp", i, None, 1)  # only max
    assert got.tolist() == [[-3, 0, 1, 1]]
    got = call("hardtanh", i)  # int defaults -1, 1 keep int64
    assert got.dtype == np.int64 and got.tolist() == [[-1, 0, 1, 1]]
    got = call("hardtanh", i, -1.5, 1.7)  # hardtanh keeps int64: float bounds truncated, as torch casts them
    assert got.dtype == np.int64 and got.tolist() == [[-1, 0, 1, 1]]
    with pytest.raises(dtensor.DTensorError, match="leaky_relu"):
        call("leaky_relu", i)  # float only, as torch's leaky_relu_cpu


def test_clamp_min_above_max_gives_max_and_nan_stays():
    x = np.array([np.nan, -2.0, 0.5, 4.0], dtype=np.float32)
    got = call("clamp", x, 3.0, 1.0)
    assert np.isnan(got[0]) and got[1:].tolist() == [1.0, 1.0, 1.0]


@pytest.mark.parametrize("name,args,reduces", [("clamp", (-0.5, 0.8), False), ("hardtanh", (), False),
                                                 ("softshrink", (0.5,), False), ("leaky_relu", (0.2,), True)])
def test_partial_max_through_a_monotone_row(name, args, reduces):
    # Each rank holds X or X lowered by 1..3 at seeded positions; the max over the 4 ranks is X.
    rng = np.random.default_rng(9)
    owner = rng.integers(0, 4, X.shape)
    low = rng.integers(1, 4, X.shape).astype(np.float32)

    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (4,))
        local = np.where(owner == w.rank, X, X - low).astype(np.float32)
        d = dtensor.DTensor.from_local(local, mesh, [Partial("max")])
        y = dtensor.ops.call(name, d, *args)
        return [str(p) for p in y.placements], y.full_tensor()

    want = call(name, X, *args)
    for placements, full in dtensor.run_threads(4, fn):
        np.testing.assert_allclose(full, want, rtol=1e-6)
        assert ("Partial" in placements[0] or "P(" in placements[0]) != reduces, placements


def test_sharded_input_keeps_its_shards():
    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        d = dtensor.distribute_tensor(X, mesh, [Shard(0), Shard(1)])
        y = dtensor.ops.call("elu", d, 1.5, 1.2, 0.7)
        return list(y.placements), y.full_tensor()

    want = call("elu", X, 1.5, 1.2, 0.7)
    want_np = np.where(X > 0, 1.2 * X, 1.5 * 1.2 * (np.exp(0.7 * X) - 1))
    np.testing.assert_allclose(want, want_np, rtol=1e-5, atol=1e-6)
    for placements, full in dtensor.run_threads(4, fn):
        assert placements == [Shard(0), Shard(1)]
        np.testing.assert_allclose(full, want, rtol=1e-6)
