# Gradients through writes into views (autograd's CopySlices: F.pad's circular mode, which copies
# slices of the input into an empty output, and slice assignment), which make the gradient's buffer
# with new_empty_strided: through the bridge that is a bridge tensor laid out as the gradient
# (torch_bridge._new_empty_strided; torch's decomposition gave a plain tensor, and the gradient's
# copy into it was refused). Against torch on one device: values and gradients on [2, 2] thread
# meshes with the padded, batch and channel dims sharded (unevenly) and a Partial input.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

F = torch.nn.functional
# (input shape, pad): 1, 2 and 3 padded dims
PADS = {1: ((2, 3, 5), (2, 1)), 2: ((2, 3, 4, 5), (1, 2, 3, 0)), 3: ((1, 2, 3, 4, 3), (1, 1, 0, 2, 2, 1))}
LAYOUTS = {
    "replicated": [Replicate(), Replicate()],
    "batch_channels": [Shard(0), Shard(1)],
    "last_dim": [Shard(-1), Replicate()],
    "last_dim_both": [Shard(-1), Shard(-1)],
    "partial": [Partial(), Shard(1)],
}


def on_mesh(x, x_pl, f, w):
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        if any(p.is_partial() for p in x_pl):  # pieces x / 4 and 3 x / 4 on mesh dim 0
            block = bridge.distribute(x, mesh, [Replicate(), x_pl[1]]).to_local()
            xi = bridge.from_local(block * (2 * mesh.get_coordinate()[0] + 1) / 4, mesh, x_pl, shape=x.shape)
        else:
            xi = bridge.distribute(x, mesh, [Shard(p.dim % x.dim()) if p.is_shard() else p for p in x_pl])
        xi.requires_grad_()
        out = f(xi)
        (out * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
        return out.full_tensor(), xi.grad.full_tensor()

    return dt.run_threads(4, fn)


def check(x, x_pl, f):
    xr = x.clone().requires_grad_()
    want = f(xr)
    w = torch.randn(want.shape, dtype=x.dtype, generator=torch.Generator().manual_seed(3))
    (want * w).sum().backward()
    for out, gx in on_mesh(x, x_pl, f, w):
        torch.testing.assert_close(out, want.detach(), rtol=0, atol=0)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dims", [1, 2, 3])
def test_circular_pad_matches_torch(dims, layout):
    shape, pad = PADS[dims]
    x = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(dims))
    check(x, LAYOUTS[layout], lambda t: F.pad(t, pad, mode="circular"))


# a slice of a sharded dim (batch_channels, partial) is written on into y (torch_bridge._write_to_base)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_slice_assignment_gradient_matches_torch(layout):
    x = torch.randn(3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7))

    def f(t):
        y = t * 2
        y[:, 1:3] = t[:, 2:4].sin()  # a write into a view of y: y's gradient through CopySlices
        return y

    check(x, LAYOUTS[layout], f)


def test_new_empty_strided_layouts():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        x = bridge.distribute(torch.zeros(4, 6), mesh, [Shard(0), Shard(1)])
        same = torch.ops.aten.new_empty_strided.default(x, [4, 6], [6, 1])
        other = torch.ops.aten.new_empty_strided.default(x, [3, 2], [2, 1])
        # other strides: a bridge tensor is contiguous, and says so
        transposed = torch.ops.aten.new_empty_strided.default(x, [4, 6], [1, 4])
        return (type(same), tuple(same.placements), tuple(same.shape), type(other), tuple(other.placements),
                type(transposed), tuple(transposed.shape), transposed.stride())

    for r in dt.run_threads(4, fn):
        assert r == (bridge.DTensor, (Shard(0), Shard(1)), (4, 6), bridge.DTensor, (Replicate(), Replicate()),
                     bridge.DTensor, (4, 6), (6, 1))
