# nonzero as a registered op with a data-dependent output shape (OpDef::data_dependent): through the
# bridge on [4] and [2, 2] thread meshes, every placement of the input against torch.nonzero on one
# device: Shard(0), Shard(1) and both, uneven shapes, empty blocks, all zeros, an empty and a 0-d
# input, every dtype kind. The output is replicated with the global row count on every rank, and a
# second call on the same layout with other data gets its own count (no size cached).
import pytest

import dtensor
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402
from dtensor import torch_bridge  # noqa: E402

G = torch.Generator().manual_seed(11)


def sparse(shape, dtype=torch.float64, zero_lead=True):
    """Random values with about 2 in 3 zero, the first third of the rows (dim 0) all zero."""
    x = torch.randn(shape, dtype=torch.float64, generator=G)
    x[x.abs() < 1.0] = 0
    if zero_lead and x.dim() > 0:
        x[: x.shape[0] // 3] = 0
    if dtype.is_complex:
        return torch.complex(x, x.roll(1, -1) if x.dim() else x).to(dtype)
    return x.to(dtype)


def on_mesh(fn, shape):
    n = 1
    for s in shape:
        n *= s
    return dtensor.run_threads(n, lambda w: fn(dtensor.init_device_mesh("cpu", shape)))


def check(x, mesh_shape, pl):
    want = torch.nonzero(x)

    def fn(mesh):
        d = bridge.distribute(x, mesh, pl)
        out = torch.nonzero(d)
        return tuple(out.shape), out.placements, tuple(out.to_local().shape), out.full_tensor()

    for shape, placements, local, got in on_mesh(fn, mesh_shape):
        assert shape == tuple(want.shape) and local == tuple(want.shape)
        assert placements == tuple(Replicate() for _ in mesh_shape)
        assert got.dtype == torch.int64 and torch.equal(got, want), (pl, got, want)


def test_nonzero_is_a_registered_op_in_the_bridge():
    entry = torch_bridge._native_entry(torch.ops.aten.nonzero.default)
    assert isinstance(entry, tuple) and entry[0] == "nonzero"


ONE_D = [[Shard(0)], [Shard(1)], [Replicate()]]
TWO_D = [[Shard(0), Shard(1)], [Shard(1), Shard(0)], [Shard(0), Shard(0)], [Shard(1), Shard(1)],
         [Replicate(), Shard(1)], [Shard(0), Replicate()]]


@pytest.mark.parametrize("shape", [(6, 5), (3, 7), (5, 3), (9, 2)])  # uneven; (3, 7): an empty block on 4
def test_every_placement_on_4_and_2x2_ranks(shape):
    x = sparse(shape)
    for pl in ONE_D:
        check(x, (4,), pl)
    for pl in TWO_D:
        check(x, (2, 2), pl)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int64, torch.int32, torch.float32, torch.bfloat16,
                                   torch.complex64])
def test_every_dtype_kind(dtype):
    x = sparse((7, 4), dtype)
    check(x, (2, 2), [Shard(1), Shard(0)])
    check(x, (4,), [Shard(0)])


def test_three_dims_sharded_off_the_leading_dim():
    x = sparse((3, 4, 5))
    check(x, (2, 2), [Shard(2), Shard(1)])
    check(x, (4,), [Shard(2)])


def test_a_leading_dim_of_one_keeps_rank_order():
    x = sparse((1, 9), zero_lead=False)
    check(x, (4,), [Shard(1)])
    check(x, (2, 2), [Shard(1), Shard(1)])


def test_all_zeros_empty_and_0d():
    check(torch.zeros(4, 6), (2, 2), [Shard(0), Shard(1)])  # [0, 2]
    check(torch.zeros(5, 0), (4,), [Shard(0)])             # [0, 2]
    check(torch.tensor(2.5), (4,), [Replicate()])          # [1, 0]
    check(torch.tensor(0.0), (2, 2), [Replicate(), Replicate()])  # [0, 0]


def test_the_same_layout_with_other_data_gets_its_own_count():
    xs = [sparse((6, 5)), torch.ones(6, 5), torch.zeros(6, 5)]

    def fn(mesh):
        outs = []
        for x in xs:
            for pl in ([Shard(0), Shard(1)], [Replicate(), Replicate()]):
                outs.append(torch.nonzero(bridge.distribute(x, mesh, pl)).full_tensor())
        return outs

    for outs in on_mesh(fn, (2, 2)):
        for k, got in enumerate(outs):
            assert torch.equal(got, torch.nonzero(xs[k // 2])), k


def test_argwhere_and_as_tuple_run_through_nonzero():
    x = sparse((6, 5))

    def fn(mesh):
        d = bridge.distribute(x, mesh, [Shard(1), Shard(0)])
        return torch.argwhere(d).full_tensor(), [c.full_tensor() for c in torch.nonzero(d, as_tuple=True)]

    for got, cols in on_mesh(fn, (2, 2)):
        assert torch.equal(got, torch.argwhere(x))
        assert len(cols) == 2 and all(torch.equal(a, b) for a, b in zip(cols, torch.nonzero(x, as_tuple=True)))
