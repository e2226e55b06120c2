# as_strided and resize_ through the bridge: registered ops since 2026-11-29 (ops/strided/,
# kernels/cpu/strided.h) on the tensor's whole contiguous layout (a sharded input is gathered; a
# Partial one passes), against torch on one device: values and as_strided's gradient (overlapping
# windows add up) on [2, 2] and [4] thread meshes; dtensor's own kernels through dtensor.ops.call;
# a bridge view, positions past the tensor and a growing resize_ as documented.
import numpy as np
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

# (size, stride, storage_offset) on a [4, 5] tensor: overlapping windows, a transposed read, a 0 stride.
STRIDED = [((3, 4), (5, 1), 2), ((5, 4), (1, 5), 0), ((2, 3, 2), (4, 1, 0), 1), ((6,), (3,), 2)]
LAYOUTS = {"rows": ((2, 2), [Shard(0), Shard(1)]), "partial": ((2, 2), [Partial(), Replicate()]),
           "uneven_4": ((4,), [Shard(1)]), "replicated": ((4,), [Replicate()])}


@pytest.mark.parametrize("case", range(len(STRIDED)))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_as_strided_matches_torch(layout, case):
    size, stride, offset = STRIDED[case]
    mesh_shape, pl = LAYOUTS[layout]
    g = torch.Generator().manual_seed(case)
    x = torch.randn(4, 5, dtype=torch.float64, generator=g)
    w = torch.randn(size, dtype=torch.float64, generator=g)
    xr = x.clone().requires_grad_()
    want = xr.as_strided(size, stride, offset)
    (want * w).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", mesh_shape)
        if pl[0].is_partial():
            xi = bridge.from_local(x * (mesh.get_coordinate()[0] + 1) / 3, mesh, pl, shape=x.shape)
        else:
            xi = bridge.distribute(x, mesh, pl)
        xi.requires_grad_()
        out = xi.as_strided(size, stride, offset)
        (out * bridge.distribute(w, mesh, [Replicate()] * len(mesh_shape))).sum().backward()
        return out.full_tensor(), xi.grad.full_tensor()

    for out, gx in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", range(len(STRIDED)))
def test_dtensor_kernels_match_torch(case):
    """dtensor's own as_strided kernel and backward (C++ autograd: scatter_add at the positions) on
    a sharded input, against torch's values and gradient."""
    size, stride, offset = STRIDED[case]
    x = torch.arange(20, dtype=torch.float64).reshape(4, 5)
    w = torch.randn(size, dtype=torch.float64, generator=torch.Generator().manual_seed(case))
    xr = x.clone().requires_grad_()
    want = xr.as_strided(size, stride, offset)
    (want * w).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xi = dt.distribute_tensor(x.numpy(), mesh, [Shard(0), Shard(1)]).requires_grad_()
        out = dt.ops.call("as_strided", xi, list(size), list(stride), offset)
        loss = dt.ops.call("sum", dt.ops.call("mul", out, dt.distribute_tensor(w.numpy(), mesh, [Replicate()] * 2)))
        loss.backward()
        return np.asarray(out.full_tensor()), np.asarray(xi.grad.full_tensor())

    for out, gx in dt.run_threads(4, fn):
        torch.testing.assert_close(torch.from_numpy(out), want.detach())
        torch.testing.assert_close(torch.from_numpy(gx), xr.grad)


@pytest.mark.parametrize("size", [(6, 5), (3, 2), (2, 3, 5), (31,)])
def test_resize_matches_torch(size):
    """resize_ keeps self's first elements in row-major order; where it grows (31 of 30) torch
    leaves the new element uninitialized and dtensor makes it 0: only the kept ones compare."""
    x = torch.randn(5, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    want = x.clone().resize_(size)
    kept = min(want.numel(), x.numel())

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xi = bridge.distribute(x, mesh, [Shard(0), Shard(1)])
        r = xi.resize_(size)
        return r is xi, tuple(xi.shape), xi.full_tensor()

    for same, shape, got in dt.run_threads(4, fn):
        assert same and shape == tuple(size)
        torch.testing.assert_close(got.reshape(-1)[:kept], want.reshape(-1)[:kept], rtol=0, atol=0)
        assert torch.all(got.reshape(-1)[kept:] == 0)


def test_strided_refusals_name_the_op():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.randn(4, 5, dtype=torch.float64), mesh, [Shard(0)])
        with pytest.raises((dt.DTensorError, RuntimeError), match="as_strided.*view"):
            x.t().as_strided((2, 2), (1, 2))  # a bridge view's strides are not its base's
        with pytest.raises((dt.DTensorError, RuntimeError), match="as_strided.*element 20 .*20 elements"):
            dt.ops.call("as_strided", dt.distribute_tensor(np.zeros((4, 5)), mesh, [Shard(0)]), [3, 3], [5, 2], 6)
        return True

    assert all(dt.run_threads(2, fn))
