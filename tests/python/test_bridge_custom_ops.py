# Ops outside ATen (custom ops) and out= overloads through the bridge (python/dtensor/torch_bridge.py:
# _other_namespace, _out_form), against torch on one device on a [2, 2] thread mesh: a custom op with
# a registered decomposition runs as it (values); one with a CompositeImplicitAutograd kernel works
# too (torch's dispatcher expands it above the bridge: values and gradients; below autograd the
# bridge runs the kernel itself: values); one with a CompositeExplicitAutograd kernel alone is
# refused naming the op; torch.mm and torch.amax with out= write the functional overload's result
# into a bridge tensor, a wrong-shaped out is refused.
import pytest

import dtensor as dt
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from torch._decomp import register_decomposition  # noqa: E402

from dtensor import bridge  # noqa: E402
from dtensor.torch_bridge import UnsupportedOpError  # noqa: E402

_lib = torch.library.Library("dtensor_bridge_test", "DEF")
_lib.define("scaled_tanh(Tensor x, Tensor w) -> Tensor")
_lib.impl("scaled_tanh", lambda x, w: torch.tanh(x) * w + x, "CompositeImplicitAutograd")
_lib.define("shifted_square(Tensor x, float c) -> Tensor")
_lib.impl("shifted_square", lambda x, c: (x - c) * (x - c), "CompositeExplicitAutograd")
_lib.define("opaque_exp(Tensor x) -> Tensor")
_lib.impl("opaque_exp", lambda x: torch.exp(x), "CompositeExplicitAutograd")
OPS = torch.ops.dtensor_bridge_test


@register_decomposition(OPS.shifted_square.default)
def _shifted_square(x, c):
    return (x - c) * (x - c)


def _data(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 4, dtype=torch.float64, generator=g), torch.randn(6, 4, dtype=torch.float64, generator=g)


def _on_mesh(fn):
    return dt.run_threads(4, lambda world: fn(dt.init_device_mesh("cpu", (2, 2))))


def test_composite_implicit_custom_op_matches_torch():
    x, w = _data(0)
    xr = x.clone().requires_grad_()
    want = OPS.scaled_tanh(xr, w)
    want.sum().backward()

    def fn(mesh):
        xi = bridge.distribute(x, mesh, [Shard(0), Shard(1)]).requires_grad_()
        out = OPS.scaled_tanh(xi, bridge.distribute(w, mesh, [Shard(0), Replicate()]))
        out.sum().backward()
        # Below autograd (as inside another op's handler) the op itself reaches the bridge, which
        # runs its CompositeImplicitAutograd kernel (_other_namespace).
        with torch._C._AutoDispatchBelowAutograd():
            below = OPS.scaled_tanh(xi.detach(), bridge.distribute(w, mesh, [Replicate(), Shard(1)]))
        return out.full_tensor(), xi.grad.full_tensor(), below.full_tensor()

    for out, gx, below in _on_mesh(fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(below, want.detach(), rtol=1e-12, atol=1e-12)


def test_decomposed_custom_op_matches_torch():
    """Values only: the op has no autograd kernel (torch itself cannot differentiate it)."""
    x, _ = _data(1)
    want = OPS.shifted_square(x, 0.25)

    def fn(mesh):
        return OPS.shifted_square(bridge.distribute(x, mesh, [Shard(1), Shard(0)]), 0.25).full_tensor()

    for out in _on_mesh(fn):
        torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)


def test_custom_op_without_composite_kernel_is_refused():
    x, _ = _data(2)

    def fn(mesh):
        with pytest.raises(UnsupportedOpError, match=r"dtensor_bridge_test\.opaque_exp\.default has no sharding rule"):
            OPS.opaque_exp(bridge.distribute(x, mesh, [Shard(0), Replicate()]))
        return True

    assert all(_on_mesh(fn))


def test_out_overloads_write_the_result():
    a, b = _data(3)
    want_mm = a @ b.T
    want_amax = torch.amax(a, dim=1, keepdim=True)

    def fn(mesh):
        ai = bridge.distribute(a, mesh, [Shard(0), Replicate()])
        bi = bridge.distribute(b, mesh, [Replicate(), Shard(1)])
        buf = bridge.distribute(torch.zeros(6, 6, dtype=torch.float64), mesh, [Replicate(), Shard(0)])
        ret = torch.mm(ai, bi.T, out=buf)
        top = bridge.distribute(torch.zeros(6, 1, dtype=torch.float64), mesh, [Shard(0), Replicate()])
        torch.amax(ai, dim=1, keepdim=True, out=top)
        with pytest.raises(UnsupportedOpError, match=r"aten\.mm\.out: out argument 'out' has shape \(2, 6\)"):
            torch.mm(ai, bi.T, out=bridge.distribute(torch.zeros(2, 6, dtype=torch.float64), mesh,
                                                      [Replicate(), Replicate()]))
        return ret is buf, buf.full_tensor(), top.full_tensor()

    for same, mm, top in _on_mesh(fn):
        assert same
        torch.testing.assert_close(mm, want_mm, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(top, want_amax, rtol=0, atol=0)
