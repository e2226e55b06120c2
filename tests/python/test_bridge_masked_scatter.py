# Tensor.masked_scatter through the bridge: ATen's masked_scatter and masked_scatter_backward,
# registered ops since 2026-11-29 (ops/masked/, kernels/cpu/masked.h), against torch on one device:
# values and gradients of self and source on [2, 2] and [4] thread meshes with self sharded (each
# block counts the mask's true elements before it: the mask stays whole), Partial self and source,
# a mask broadcast over self's leading dim, and uneven blocks.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

# (mesh, self placements, mask placements, source placements, mask shape)
LAYOUTS = {
    "rows": ((2, 2), [Shard(0), Replicate()], [Replicate(), Replicate()], [Replicate(), Replicate()], (5, 6)),
    "cols_sharded_mask": ((2, 2), [Replicate(), Shard(1)], [Shard(1), Replicate()], [Replicate(), Replicate()], (5, 6)),
    "rows_and_cols": ((2, 2), [Shard(0), Shard(1)], [Replicate(), Replicate()], [Shard(0), Replicate()], (5, 6)),
    "broadcast_mask": ((2, 2), [Shard(0), Shard(1)], [Replicate(), Replicate()], [Replicate(), Replicate()], (6,)),
    "partial": ((2, 2), [Partial(), Replicate()], [Replicate(), Replicate()], [Partial(), Replicate()], (5, 6)),
    "uneven_4": ((4,), [Shard(0)], [Replicate()], [Replicate()], (5, 6)),
    "uneven_cols_4": ((4,), [Shard(1)], [Shard(0)], [Replicate()], (5, 6)),
}


def pieces(x, mesh):
    """Pieces on mesh dim 0 (size 2) that add up to x: x / 3 and 2 x / 3."""
    return x * (mesh.get_coordinate()[0] + 1) / 3


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_masked_scatter_matches_torch(layout):
    mesh_shape, x_pl, m_pl, s_pl, mask_shape = LAYOUTS[layout]
    g = torch.Generator().manual_seed(len(layout))
    x = torch.randn(5, 6, dtype=torch.float64, generator=g)
    mask = torch.rand(mask_shape, generator=g) < 0.5
    source = torch.randn(4, 9, dtype=torch.float64, generator=g)  # more than enough elements
    w = torch.randn(5, 6, dtype=torch.float64, generator=g)
    xr, sr = x.clone().requires_grad_(), source.clone().requires_grad_()
    want = xr.masked_scatter(mask, sr)
    (want * w).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", mesh_shape)

        def put(t, pl):
            if any(p.is_partial() for p in pl):
                return bridge.from_local(pieces(t, mesh), mesh, pl, shape=t.shape).requires_grad_()
            return bridge.distribute(t, mesh, pl).requires_grad_()

        xi, si = put(x, x_pl), put(source, s_pl)
        out = xi.masked_scatter(bridge.distribute(mask, mesh, m_pl), si)
        (out * bridge.distribute(w, mesh, [Replicate()] * len(mesh_shape))).sum().backward()
        return out.full_tensor(), xi.grad.full_tensor(), si.grad.full_tensor(), tuple(out.placements)

    for out, gx, gs, placements in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gs, sr.grad, rtol=1e-12, atol=1e-12)
        if layout != "partial":  # self's Shard kept (no gather of self)
            assert any(p.is_shard() for p in placements), placements


def test_masked_scatter_counts_across_blocks():
    """Hand-computed: a mask true at flat positions 1, 4, 5, 7 of a [4, 2] tensor takes source
    elements 0..3 there, whichever rank holds the row (each rank's block starts its count at the
    true elements before it)."""
    mask = torch.tensor([[0, 1], [0, 0], [1, 1], [0, 1]], dtype=torch.bool)
    want = torch.tensor([[-1, 10], [-1, -1], [11, 12], [-1, 13]], dtype=torch.int64)

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (4,))
        x = bridge.distribute(torch.full((4, 2), -1, dtype=torch.int64), mesh, [Shard(0)])
        src = bridge.distribute(torch.arange(10, 20, dtype=torch.int64), mesh, [Replicate()])
        out = torch.ops.aten.masked_scatter(x, bridge.distribute(mask, mesh, [Replicate()]), src)
        return out.full_tensor(), tuple(out.placements)

    for out, placements in dt.run_threads(4, fn):
        assert torch.equal(out, want) and placements == (Shard(0),), (out, placements)


def test_masked_scatter_errors_name_the_op():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.zeros(4, 3, dtype=torch.float64), mesh, [Shard(0)])
        mask = bridge.distribute(torch.ones(4, 3, dtype=torch.bool), mesh, [Replicate()])
        with pytest.raises((dt.DTensorError, RuntimeError), match="masked_scatter.*12 true elements.*accepted"):
            torch.ops.aten.masked_scatter(x, mask, bridge.distribute(torch.zeros(5, dtype=torch.float64), mesh,
                                                                     [Replicate()]))
        with pytest.raises((dt.DTensorError, RuntimeError), match="masked_scatter.*source"):
            torch.ops.aten.masked_scatter(x, mask, bridge.distribute(torch.zeros(20, dtype=torch.float32), mesh,
                                                                     [Replicate()]))
        return True

    assert all(dt.run_threads(2, fn))
