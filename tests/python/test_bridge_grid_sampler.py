# F.grid_sample (4-d) through the bridge: ATen's grid_sampler_2d and grid_sampler_2d_backward,
# registered ops since 2026-11-29 (ops/sampler/, kernels/cpu/grid_sampler.h), against torch on one
# device: values and both gradients for every interpolation (bilinear, nearest, bicubic) and padding
# (zeros, border, reflection) mode, align_corners both ways, on [2, 2] and [4] thread meshes with the
# batch, the channels or the output positions sharded and with a Partial input. A grid sharded over
# its output positions gives grad_input as a Partial(sum) (each rank scatters its positions), where
# PyTorch DTensor would gather the grid.
import itertools

import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

F = torch.nn.functional
MODES = list(itertools.product(["bilinear", "nearest", "bicubic"], ["zeros", "border", "reflection"], [False, True]))
# (mesh, input placements, grid placements); input [N, C, H, W], grid [N, Ho, Wo, 2].
LAYOUTS = {
    "batch": ((2, 2), [Shard(0), Replicate()], [Shard(0), Replicate()]),
    "channels": ((2, 2), [Replicate(), Shard(1)], [Replicate(), Replicate()]),
    "rows": ((2, 2), [Replicate(), Replicate()], [Shard(1), Replicate()]),
    "rows_and_cols": ((2, 2), [Replicate(), Replicate()], [Shard(1), Shard(2)]),
    "batch_and_channels": ((2, 2), [Shard(0), Shard(1)], [Shard(0), Replicate()]),
    "partial_input": ((2, 2), [Partial(), Replicate()], [Replicate(), Replicate()]),
    "uneven_channels_4": ((4,), [Shard(1)], [Replicate()]),
    "uneven_cols_4": ((4,), [Replicate()], [Shard(2)]),
}


def data(seed, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 3, 5, 6, dtype=dtype, generator=g)
    # beyond [-1, 1] so that every padding mode matters
    grid = (torch.rand(3, 4, 5, 2, dtype=dtype, generator=g) * 2.6 - 1.3)
    w = torch.randn(3, 3, 4, 5, dtype=dtype, generator=g)
    return x, grid, w


def run(layout, mode, padding, align, x, grid, w):
    mesh_shape, x_pl, g_pl = LAYOUTS[layout]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", mesh_shape)
        if any(p.is_partial() for p in x_pl):  # Partial on mesh dim 0: pieces x / 3 and 2 x / 3
            piece = x * (mesh.get_coordinate()[0] + 1) / 3
            xi = bridge.from_local(piece, mesh, x_pl, shape=x.shape).requires_grad_()
        else:
            xi = bridge.distribute(x, mesh, x_pl).requires_grad_()
        gi = bridge.distribute(grid, mesh, g_pl).requires_grad_()
        out = F.grid_sample(xi, gi, mode=mode, padding_mode=padding, align_corners=align)
        weight = bridge.distribute(w, mesh, [p if p.is_shard() else Replicate() for p in out.placements])
        (out * weight).sum().backward()
        return out.full_tensor(), xi.grad.full_tensor(), gi.grad.full_tensor(), tuple(out.placements)

    return dt.run_threads(4, fn)


@pytest.mark.parametrize("mode,padding,align", MODES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_grid_sample_matches_torch(layout, mode, padding, align):
    x, grid, w = data(hash((layout, mode, padding, align)) % 1000)
    xr, gr = x.clone().requires_grad_(), grid.clone().requires_grad_()
    want = F.grid_sample(xr, gr, mode=mode, padding_mode=padding, align_corners=align)
    (want * w).sum().backward()
    for out, gx, gg, placements in run(layout, mode, padding, align, x, grid, w):
        torch.testing.assert_close(out, want.detach(), rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(gg, gr.grad, rtol=1e-9, atol=1e-9)
        if layout != "partial_input":  # no gather: the output keeps a shard of its inputs'
            assert any(p.is_shard() for p in placements), placements


def test_grid_sample_float32():
    x, grid, w = data(7, torch.float32)
    xr, gr = x.clone().requires_grad_(), grid.clone().requires_grad_()
    want = F.grid_sample(xr, gr, mode="bilinear", padding_mode="reflection", align_corners=False)
    (want * w).sum().backward()
    for out, gx, gg, _ in run("rows", "bilinear", "reflection", False, x, grid, w):
        torch.testing.assert_close(out, want.detach(), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gg, gr.grad, rtol=1e-4, atol=1e-4)


def test_grid_sample_uses_the_registered_op_and_keeps_shards():
    """The bridge runs dtensor's grid_sampler_2d (not torch's decomposition): a grid sharded over its
    output rows gives an output sharded over its rows, and grad_input a Partial(sum) reduced only
    where it is read."""
    x, grid, _ = data(3)
    assert "grid_sampler_2d" in bridge._registry() and "grid_sampler_2d_backward" in bridge._registry()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        xi = bridge.distribute(x, mesh, [Replicate()])
        gi = bridge.distribute(grid, mesh, [Shard(1)])
        out = torch.ops.aten.grid_sampler_2d(xi, gi, 0, 0, False)
        gx, gg = torch.ops.aten.grid_sampler_2d_backward(bridge.distribute(torch.ones(3, 3, 4, 5, dtype=torch.float64),
                                                                           mesh, [Shard(2)]),
                                                         xi, gi, 0, 0, False, [True, True])
        return tuple(out.placements), tuple(gx.placements), tuple(gg.placements)

    for out_pl, gx_pl, gg_pl in dt.run_threads(2, fn):
        assert out_pl == (Shard(2),) and gx_pl[0].is_partial() and gg_pl == (Shard(1),), (out_pl, gx_pl, gg_pl)


def test_grid_sample_errors_name_the_op():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.randn(2, 3, 4, 4, dtype=torch.float64), mesh, [Shard(0)])
        with pytest.raises((dt.DTensorError, RuntimeError), match="grid_sampler_2d.*grid"):
            torch.ops.aten.grid_sampler_2d(x, bridge.distribute(torch.zeros(2, 3, 3, 3, dtype=torch.float64), mesh,
                                                                [Shard(0)]), 0, 0, False)  # last dim 3
        with pytest.raises((dt.DTensorError, RuntimeError), match="grid_sampler_2d.*padding_mode"):
            torch.ops.aten.grid_sampler_2d(x, bridge.distribute(torch.zeros(2, 3, 3, 2, dtype=torch.float64), mesh,
                                                                [Shard(0)]), 0, 5, False)
        return True

    assert all(dt.run_threads(2, fn))


@pytest.mark.parametrize("mode,padding,align", MODES)
def test_dtensor_kernels_match_aten(mode, padding, align):
    """dtensor's own kernels (kernels/cpu/grid_sampler.cc; the bridge runs ATen's on the blocks)
    through dtensor.ops.call on a [4] mesh, the output positions sharded, against ATen's
    grid_sampler_2d and grid_sampler_2d_backward."""
    import numpy as np

    x, grid, w = data(11 + MODES.index((mode, padding, align)))
    modes = (["bilinear", "nearest", "bicubic"].index(mode), ["zeros", "border", "reflection"].index(padding), align)
    want = torch.ops.aten.grid_sampler_2d(x, grid, *modes)
    want_gx, want_gg = torch.ops.aten.grid_sampler_2d_backward(w, x, grid, *modes, [True, True])

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (4,))
        xi = dt.distribute_tensor(x.numpy(), mesh, [Replicate()])
        gi = dt.distribute_tensor(grid.numpy(), mesh, [Shard(2)])
        wi = dt.distribute_tensor(w.numpy(), mesh, [Shard(3)])
        out = dt.ops.call("grid_sampler_2d", xi, gi, *modes)
        gx, gg = dt.ops.call("grid_sampler_2d_backward", wi, xi, gi, *modes, [True, True])
        return [np.asarray(t.full_tensor()) for t in (out, gx, gg)], [tuple(t.placements) for t in (out, gx, gg)]

    for (out, gx, gg), placements in dt.run_threads(4, fn):
        torch.testing.assert_close(torch.from_numpy(out), want, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(torch.from_numpy(gx), want_gx, rtol=1e-10, atol=1e-10)
        torch.testing.assert_close(torch.from_numpy(gg), want_gg, rtol=1e-9, atol=1e-9)
        assert placements[0] == (Shard(3),) and placements[1][0].is_partial(), placements


@pytest.mark.parametrize("mode,padding,align", MODES)
def test_far_off_grid_values_match_aten(mode, padding, align):
    """Grid values far outside [-1, 1] (1e30, -1e30: coordinates no int64 holds), infinite or NaN
    give ATen's CPU values: zero, the padded border, or NaN where ATen's weights are NaN."""
    import numpy as np

    x = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    inf, nan = float("inf"), float("nan")
    grid = torch.tensor([[[[1e30, 0.2], [-1e30, 0.1], [1e17, 0.0]], [[0.3, 1e30], [-1e30, -1e30], [1e15, 0.4]]],
                         [[[nan, 0.2], [0.1, nan], [inf, 0.0]], [[-inf, 0.3], [0.5, -inf], [nan, nan]]]],
                        dtype=torch.float64)
    modes = (["bilinear", "nearest", "bicubic"].index(mode), ["zeros", "border", "reflection"].index(padding), align)
    want = torch.ops.aten.grid_sampler_2d(x, grid, *modes)

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (1,))
        out = dt.ops.call("grid_sampler_2d", dt.distribute_tensor(x.numpy(), mesh, [Replicate()]),
                          dt.distribute_tensor(grid.numpy(), mesh, [Replicate()]), *modes)
        return np.asarray(out.full_tensor())

    got = torch.from_numpy(dt.run_threads(1, fn)[0])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10, equal_nan=True)
