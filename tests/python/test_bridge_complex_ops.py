# Complex tensors through the bridge for the ops given OpDef::complex on 2026-11-29 (fourth session):
# sigmoid and silu (kernels/cpu/complex.cc: torch's formulas in complex arithmetic) and mm / bmm
# (OpenBLAS's cgemm / zgemm), against torch on one device on a [2, 2] thread mesh: values, and for
# mm / bmm / matmul the gradients of a real loss (torch's convention: grad @ other^H).
import numpy as np
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402


def _complex(shape, seed, dtype=torch.complex128):
    g = torch.Generator().manual_seed(seed)
    return torch.complex(torch.randn(shape, dtype=torch.float64, generator=g),
                         torch.randn(shape, dtype=torch.float64, generator=g)).to(dtype)


def _real_loss(outs, weights):
    return sum((torch.view_as_real(o) * w).sum() for o, w in zip(outs, weights))


def _check(fn_torch, inputs, placements, seed, tol, grads=True):
    """fn_torch on the inputs, and on bridge tensors laid out as `placements` (a Partial input as
    pieces that sum to it): values and (grads) the gradients of the same real loss must match torch's."""
    ref = [x.clone().requires_grad_(grads) for x in inputs]
    want = fn_torch(*ref)
    g = torch.Generator().manual_seed(seed + 100)
    w = torch.randn(*want.shape, 2, dtype=torch.float64, generator=g)
    if grads:
        _real_loss([want], [w]).backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xs = []
        for x, pl in zip(inputs, placements):
            if any(p.is_partial() for p in pl):
                rank = mesh.get_coordinate()[0]
                xs.append(bridge.from_local(x * (0.25 if rank == 0 else 0.75), mesh, pl, shape=x.shape))
            else:
                xs.append(bridge.distribute(x, mesh, pl))
        for x in xs:
            x.requires_grad_(grads)
        out = fn_torch(*xs)
        if grads:
            _real_loss([out], [bridge.distribute(w, mesh, [Replicate(), Replicate()])]).backward()
        return out.full_tensor(), [x.grad.full_tensor() for x in xs] if grads else []

    for out, got_grads in dt.run_threads(4, fn):
        assert out.dtype == want.dtype
        torch.testing.assert_close(out, want.detach(), rtol=tol, atol=tol)
        for got, r in zip(got_grads, ref):
            torch.testing.assert_close(got, r.grad, rtol=tol, atol=tol)


# Values only: torch's autograd reaches sigmoid_backward / silu_backward, which the bridge runs with
# gelu_backward's rules (OpDef::aten aliases), real only; dtensor's own backward of complex sigmoid
# and silu is tests/autograd:gradcheck_test's.
@pytest.mark.parametrize("op", ["sigmoid", "silu"])
@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_sigmoid_silu_match_torch(op, dtype):
    f = torch.sigmoid if op == "sigmoid" else torch.nn.functional.silu
    x = _complex((6, 4), 1, dtype) * 2
    tol = 1e-5 if dtype == torch.complex64 else 1e-12
    for pl in ([Shard(0), Shard(1)], [Partial(), Replicate()], [Replicate(), Shard(0)]):
        _check(f, [x], [pl], 2, tol, grads=False)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_mm_matches_torch(dtype):
    a, b = _complex((6, 4), 3, dtype), _complex((4, 8), 4, dtype)
    tol = 1e-5 if dtype == torch.complex64 else 1e-12
    for pa, pb in (([Shard(0), Replicate()], [Replicate(), Shard(1)]),  # rows x columns
                   ([Shard(1), Replicate()], [Shard(0), Replicate()]),  # the contraction dim: Partial out
                   ([Partial(), Replicate()], [Replicate(), Shard(1)])):
        _check(torch.mm, [a, b], [pa, pb], 5, tol)


def test_complex_bmm_and_matmul_match_torch():
    a, b = _complex((4, 3, 5), 6), _complex((4, 5, 2), 7)
    _check(torch.bmm, [a, b], [[Shard(0), Shard(2)], [Shard(0), Shard(1)]], 8, 1e-12)
    _check(torch.matmul, [a, b], [[Replicate(), Shard(1)], [Shard(0), Replicate()]], 9, 1e-12)


def test_complex_mm_refuses_mixed_dtypes():
    a, b = _complex((3, 4), 10), torch.randn(4, 2, dtype=torch.float64)

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        with pytest.raises(dt.DTensorError, match=r"mm\(complex128\[3, 4\].*accepted: two tensors of one complex"):
            dt.ops.call("mm", dt.distribute_tensor(a.numpy(), mesh, [Replicate(), Replicate()]),
                        dt.distribute_tensor(b.numpy(), mesh, [Replicate(), Replicate()]))
        return True

    assert all(dt.run_threads(4, fn))


@pytest.mark.parametrize("op", ["sigmoid", "silu", "mm", "bmm"])
def test_dtensor_complex_kernels_match_torch(op):
    """dtensor's own kernels and backward (C++ autograd) through dtensor.ops.call on sharded
    complex128 inputs (the bridge above runs torch's kernels on the blocks): values and the
    gradients of the real loss sum(view_as_real(out) * w) against torch's."""
    shapes = {"sigmoid": [(6, 4)], "silu": [(6, 4)], "mm": [(6, 4), (4, 8)], "bmm": [(4, 3, 5), (4, 5, 2)]}[op]
    xs = [_complex(s, 20 + i) * 2 for i, s in enumerate(shapes)]
    # torch does not differentiate complex silu: its reference is x * sigmoid(x), which it does.
    f = {"sigmoid": torch.sigmoid, "silu": lambda x: x * torch.sigmoid(x), "mm": torch.mm, "bmm": torch.bmm}[op]
    ref = [x.clone().requires_grad_() for x in xs]
    want = f(*ref)
    w = torch.randn(*want.shape, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(30))
    (torch.view_as_real(want) * w).sum().backward()
    layouts = [[Shard(0), Shard(1)], [Shard(1), Replicate()]]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        ins = [dt.distribute_tensor(x.numpy(), mesh, pl).requires_grad_() for x, pl in zip(xs, layouts)]
        out = dt.ops.call(op, *ins)
        pairs = dt.ops.call("view_as_real", out)
        loss = dt.ops.call("sum", dt.ops.call("mul", pairs, dt.distribute_tensor(w.numpy(), mesh, [Replicate()] * 2)))
        loss.backward()
        return np.asarray(out.full_tensor()), [np.asarray(i.grad.full_tensor()) for i in ins]

    for out, grads in dt.run_threads(4, fn):
        torch.testing.assert_close(torch.from_numpy(out), want.detach(), rtol=1e-12, atol=1e-12)
        for g, r in zip(grads, ref):
            torch.testing.assert_close(torch.from_numpy(g), r.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.complex128])
def test_complex_python_scalars_match_torch(dtype, native):
    """mul / add / div by a complex Python number (ATen's .Scalar overloads; dtensor's IValue holds
    no complex): run as the .Tensor overload with a wrapped 0-d tensor, torch's dtype promotion
    (float32 * 1j is complex64), through the native and the Python __torch_dispatch__."""
    from dtensor import torch_bridge

    x = _complex((6, 4), 40).real.to(dtype) if not dtype.is_complex else _complex((6, 4), 40)
    calls = [lambda t: torch.ops.aten.mul.Scalar(t, 1j), lambda t: torch.ops.aten.add.Scalar(t, 2 - 0.5j),
             lambda t: torch.ops.aten.div.Scalar(t, 0.5 + 2j), lambda t: t * (3 + 1j)]
    wants = [c(x) for c in calls]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xi = bridge.distribute(x, mesh, [Shard(0), Shard(1)])
        return [c(xi).full_tensor() for c in calls]

    torch_bridge._use_native_dispatch(native)
    try:
        results = dt.run_threads(4, fn)
    finally:
        torch_bridge._use_native_dispatch(True)
    for outs in results:
        for got, want in zip(outs, wants):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_polar_gradient_matches_torch():
    """torch.polar's backward multiplies by 1j (mul.Scalar with a complex number)."""
    g = torch.Generator().manual_seed(50)
    r, theta = torch.rand(5, 4, dtype=torch.float64, generator=g) + 0.5, torch.randn(5, 4, dtype=torch.float64, generator=g)
    _check(torch.polar, [r, theta], [[Shard(0), Replicate()], [Replicate(), Shard(1)]], 51, 1e-12)
