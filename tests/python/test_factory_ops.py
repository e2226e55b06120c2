# The Core ATen factories as registered ops (ops/factory/, run by dispatch/factory.h's call_factory
# through dtensor.ops.call_factory and dtensor's factories): values and dtypes against torch's own
# factories, on [4] and [2, 2] thread meshes with Shard and Replicate outputs (uneven and empty
# blocks included, each the block torch.chunk gives), rand / randn / randperm against the
# one-device draw of the same Philox key, and the errors of the engine (naming the call, the
# placements asked and those accepted) and of the ops' meta.
import math

import pytest

torch = pytest.importorskip("torch")

import dtensor as dt  # noqa: E402
from dtensor import Partial, Replicate, Shard, bridge  # noqa: E402
from dtensor import torch_bridge  # noqa: E402

LAYOUTS = [((4,), [Shard(0)]), ((4,), [Replicate()]), ((2, 2), [Shard(0), Shard(0)]),
           ((2, 2), [Replicate(), Shard(-1)]), ((2, 2), [Shard(1), Replicate()])]

# (dtensor factory, args, kwargs): torch's factory of that name with the same arguments is the reference.
CASES = [("arange", (5,), {}), ("arange", (-4, 9), {}), ("arange", (7, -6, -3), {}), ("arange", (-1, 2, 0.3), {}),
         ("arange", (0.5, 5), {"dtype": torch.int64}), ("arange", (1, 4, 0.25), {"dtype": torch.float64}),
         ("arange", (5, 100, 9), {"dtype": torch.bfloat16}), ("arange", (0, 5, 0.5), {"dtype": torch.int32}),
         ("arange", (0, 5, 0.5), {"dtype": torch.int64}), ("arange", (0, 2.5, 1), {"dtype": torch.int64}),
         ("arange", (0.5, 0.7, 1), {"dtype": torch.int64}), ("arange", (2 ** 62, 2 ** 63 - 1, 2 ** 61), {}),
         ("full", ((5, 3), -2.5), {}), ("full", ((5, 3), 7), {}), ("full", ((3, 5), True), {}),
         ("full", ((5, 2), 2 ** 60 + 1), {}), ("full", ((3, 2), 2.5), {"dtype": torch.int64}),
         ("full", ((2, 5), 3), {"dtype": torch.float16}), ("scalar_tensor", (-5,), {}),
         ("scalar_tensor", (3,), {"dtype": torch.int64})]


def on_mesh(fn, shape):
    return dt.run_threads(math.prod(shape), lambda w: fn(dt.init_device_mesh("cpu", shape)))


def fitted(placements, ndim):
    """The layout's placements with a Shard of a dim the output lacks made Replicate (1-d and 0-d outputs)."""
    return [p if not p.is_shard() or (p.dim if p.dim >= 0 else p.dim + ndim) in range(ndim) else Replicate()
            for p in placements]


@pytest.mark.parametrize("mesh_shape,placements", LAYOUTS)
def test_values_dtypes_and_blocks_are_torchs(mesh_shape, placements):
    def fn(mesh):
        out = []
        for name, args, kwargs in CASES:
            ndim = torch.__dict__[name](*args, **kwargs).dim()
            got = getattr(dt, name)(*args, **kwargs, device_mesh=mesh, placements=fitted(placements, ndim))
            chunk = bridge.distribute(torch.zeros(got.shape), mesh, got.placements)._local.shape
            out.append((got.full_tensor(), tuple(got._local.shape), tuple(chunk), tuple(got.placements)))
        return out

    for ranks in on_mesh(fn, mesh_shape):
        for (name, args, kwargs), (got, block, chunk, got_placements) in zip(CASES, ranks):
            want = getattr(torch, name)(*args, **kwargs)
            what = f"{name}{args} {kwargs} on {mesh_shape} {got_placements}"
            assert got.dtype == want.dtype and got.shape == want.shape, what
            assert block == chunk, what  # the rank's block is the one torch.chunk gives
            if want.dtype.is_floating_point and name == "arange":
                # torch's vectorized kernel adds the step within a vector's chunk: equal up to rounding.
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6 if want.dtype == torch.float32 else 1e-12,
                                           msg=what)
            else:
                assert torch.equal(got, want), what


def test_empty_is_zeros_of_the_layout():
    def fn(mesh):
        e = dt.empty(5, 3, dtype=torch.int64, device_mesh=mesh, placements=[Shard(0)])
        s = dt.empty_strided((3, 5), (1, 3), device_mesh=mesh, placements=[Shard(1)])
        return e.full_tensor(), tuple(e._local.shape), s.full_tensor(), tuple(s._local.shape)

    for rank, (e, eb, s, sb) in enumerate(on_mesh(fn, (4,))):
        assert torch.equal(e, torch.zeros(5, 3, dtype=torch.int64)) and torch.equal(s, torch.zeros(3, 5))
        assert eb == ((2, 3), (2, 3), (1, 3), (0, 3))[rank] and sb == ((3, 2), (3, 2), (3, 1), (3, 0))[rank]


def _key_draw(mesh, name, shape, dtype, seed, offset):
    """philox_rand_like / philox_randn_like (ops/random/, what dtensor.rand drew before the factory
    ops) of a replicated tensor of `shape` with this Philox key: the one-device draw."""
    z = bridge.distribute(torch.zeros(shape, dtype=dtype), mesh, [Replicate()] * mesh.ndim)
    (drawn,) = torch_bridge._b.prepare(f"philox_{name}_like", (z, seed, offset), {"dtype": torch_bridge._dtype_name(dtype)}).run()
    return drawn._local


@pytest.mark.parametrize("name", ["rand", "randn", "randperm"])
@pytest.mark.parametrize("mesh_shape,placements", LAYOUTS)
def test_draws_are_the_one_device_draw_of_their_key(name, mesh_shape, placements):
    def fn(mesh):
        torch.manual_seed(7)
        anchor = bridge.distribute(torch.zeros(1), mesh, [Replicate()] * mesh.ndim)
        seed, offset = torch_bridge._philox_key(anchor)  # the factory's own call takes offset + 1
        if name == "randperm":
            got = dt.randperm(37, device_mesh=mesh, placements=fitted(placements, 1))
            keys = _key_draw(mesh, "rand", (37,), torch.float64, seed, offset + 1)
            want = torch.argsort(keys, stable=True)
        else:
            got = getattr(dt, name)(7, 5, dtype=torch.float64, device_mesh=mesh, placements=placements)
            want = _key_draw(mesh, name, (7, 5), torch.float64, seed, offset + 1)
        return got.full_tensor(), want, got._local.clone(), tuple(got._spec.local_offset)

    for got, want, block, offset in on_mesh(fn, mesh_shape):
        assert got.dtype == want.dtype and torch.equal(got, want)
        # Every rank's own block (replicas included) is its slice of the one-device draw.
        assert torch.equal(block, want[tuple(slice(o, o + n) for o, n in zip(offset, block.shape))])
        if name == "randperm":
            assert torch.equal(torch.sort(got).values, torch.arange(37))


def call(mesh, name, args, kwargs=None, placements=None):
    return dt.ops.call_factory(name, list(args), kwargs or {}, mesh, placements or [Replicate()] * mesh.ndim)


def test_the_engine_infers_dtypes_as_aten():
    def fn(mesh):
        return {"arange int": call(mesh, "arange", [5]).dtype, "arange float": call(mesh, "arange.start", [0, 2.5]).dtype,
                "full bool": call(mesh, "full", [[2], True]).dtype, "full int": call(mesh, "full", [[2], 3]).dtype,
                "full float": call(mesh, "full", [[2], 3.0]).dtype, "scalar_tensor int": call(mesh, "scalar_tensor", [3]).dtype,
                "empty": call(mesh, "empty", [[2, 3]]).dtype, "randperm": call(mesh, "randperm", [4], {"seed": 1, "offset": 2}).dtype,
                "rand": call(mesh, "rand", [[3]], {"seed": 1, "offset": 2}).dtype}

    got, _ = on_mesh(fn, (2,))
    assert got == {"arange int": "int64", "arange float": "float32", "full bool": "bool", "full int": "int64",
                   "full float": "float32", "scalar_tensor int": "float32", "empty": "float32", "randperm": "int64",
                   "rand": "float32"}
    assert got["arange int"] == str(torch.arange(5).dtype)[6:] and got["full bool"] == str(torch.full((2,), True).dtype)[6:]


ERRORS = [
    (("full", [[2, -1], 1.0]), None, r"full\(size=\[2, -1\].*size \[2, -1\] has a negative size; accepted: sizes >= 0"),
    (("empty", [[2 ** 32, 2 ** 32]]), None, r"element count overflows int64"),
    (("arange.start_step", [0, 5, 0]), None, r"step must be nonzero"),
    (("arange.start_step", [5, 0, 1]), None, r"inconsistent with step sign"),
    (("arange.start", [0, float("inf")]), None, r"unsupported range"),
    (("arange", [3], {"dtype": "bool"}), None, r"dtype bool; accepted: int32, int64 or a floating dtype"),
    (("rand", [[3]], {"seed": 1, "offset": 0, "dtype": "int64"}), None, r"dtype int64; accepted: float32"),
    (("randperm", [-1], {"seed": 1, "offset": 0}), None, r"n = -1; accepted: n >= 0"),
    (("randperm", [3], {"seed": 1, "offset": 0, "dtype": "bool"}), None, r"randperm.*dtype bool"),
    (("full", [[2], 3e39], {"dtype": "float32"}), None, r"cannot be converted to float32 without overflow"),
    (("rand", [[3]]), None, r"seed"),
    (("full", [[5], 1.0]), [Partial(), Replicate()], r"asked as \[P\(sum\), R\].*cannot be Partial.*accepted: Shard and Replicate"),
    (("full", [[5], 1.0]), [Shard(1), Replicate()], r"Shard\(1\) of a 1-d output, which has no dim 1"),
    (("full", [[5], 1.0]), [Shard(0)], r"1 placements \[S\(0\)\] for a 2-d mesh"),
    (("scalar_tensor", [1.0]), [Shard(0), Replicate()], r"Shard\(0\) of a 0-d output"),
    (("relu", [[2]]), None, r"relu.*takes tensor input 'self', so it is no factory"),
]


def test_errors_name_the_call_and_what_is_accepted():
    def fn(mesh):
        for args, placements, pattern in ERRORS:
            with pytest.raises(dt.DTensorError, match=pattern):
                call(mesh, *args, placements=placements)
        return True

    assert all(on_mesh(fn, (2, 2)))
