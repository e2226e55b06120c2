# torch.fft through the bridge: ATen's _fft_r2c, _fft_c2r and _fft_c2c are dtensor ops (ops/spectral/,
# kernels over Eigen's FFT; the bridge runs torch's kernel on the blocks). fft, ifft, rfft, irfft,
# fft2, rfftn and hfft of real and complex inputs, float32/float64 and complex64/complex128, on a
# [2, 2] and a [4] thread mesh with a batch dim sharded, replicated and Partial(sum) inputs: values
# and gradients (torch's autograd on both sides) against torch on the whole tensors, and the output
# placements (the batch dim stays sharded: the rule kept the Shard of a dim not transformed).
import pytest

torch = pytest.importorskip("torch")

import dtensor  # noqa: E402
from dtensor import Partial, Replicate, Shard, bridge  # noqa: E402

G = torch.Generator().manual_seed(11)
REAL = torch.randn(5, 6, 7, generator=G, dtype=torch.float64)
IMAG = torch.randn(5, 6, 7, generator=G, dtype=torch.float64)

OPS = {  # name: (fn, input kind)
    "fft_real": (lambda x: torch.fft.fft(x), "real"),
    "fft": (lambda x: torch.fft.fft(x, dim=1, norm="ortho"), "complex"),
    "ifft": (lambda x: torch.fft.ifft(x), "complex"),
    "rfft": (lambda x: torch.fft.rfft(x, norm="forward"), "real"),
    "irfft": (lambda x: torch.fft.irfft(x, n=10), "complex"),
    "irfft_odd": (lambda x: torch.fft.irfft(x, dim=1), "complex"),
    "fft2": (lambda x: torch.fft.fft2(x), "complex"),
    "fft2_real": (lambda x: torch.fft.fft2(x, norm="ortho"), "real"),
    "rfftn": (lambda x: torch.fft.rfftn(x, dim=(1, 2)), "real"),
    "hfft": (lambda x: torch.fft.hfft(x), "complex"),
}
LAYOUTS = {  # mesh shape: placements of the input
    "S0_R": ((2, 2), [Shard(0), Replicate()]),
    "R_R": ((2, 2), [Replicate(), Replicate()]),
    "P_S0": ((2, 2), [Partial("sum"), Shard(0)]),
    "S0": ((4,), [Shard(0)]),
}


def input_of(kind, dtype):
    if kind == "real":
        return REAL.to(dtype)
    return torch.complex(REAL, IMAG).to(dtype)


def loss_weight(o):
    """Fixed weights for sum(<o, w>) over the real pairs: a complex output's gradient has both parts."""
    pairs = torch.view_as_real(o) if o.is_complex() else o
    return (torch.arange(pairs.numel(), dtype=pairs.dtype).reshape(pairs.shape) % 5 - 2) / 3


def reference(fn, x):
    leaf = x.clone().requires_grad_()
    out = fn(leaf)
    pairs = torch.view_as_real(out) if out.is_complex() else out
    (pairs * loss_weight(out)).sum().backward()
    return out.detach(), leaf.grad


def on_mesh(fn, x, mesh_shape, placements):
    def rank(r):
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        leaf = bridge.distribute(x.clone(), mesh, placements).detach().requires_grad_()
        out = fn(leaf)
        pairs = torch.view_as_real(out) if out.is_complex() else out
        w = bridge.distribute(loss_weight(out.full_tensor()), mesh, [Replicate()] * len(mesh_shape))
        (pairs * w).sum().backward()
        return tuple(out.placements), out.full_tensor().detach(), leaf.grad.full_tensor()

    return dtensor.run_threads(4, rank)[0]


def tolerance(dtype):
    return (1e-4, 1e-4) if dtype in (torch.float32, torch.complex64) else (1e-10, 1e-10)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(OPS))
@pytest.mark.parametrize("precision", ["single", "double"])
def test_fft_matches_torch(name, layout, precision):
    fn, kind = OPS[name]
    dtype = {("real", "single"): torch.float32, ("real", "double"): torch.float64,
             ("complex", "single"): torch.complex64, ("complex", "double"): torch.complex128}[kind, precision]
    x = input_of(kind, dtype)
    want, want_grad = reference(fn, x)
    mesh_shape, placements = LAYOUTS[layout]
    got_placements, got, got_grad = on_mesh(fn, x, mesh_shape, placements)
    rtol, atol = tolerance(dtype)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)
    torch.testing.assert_close(got_grad, want_grad, rtol=rtol, atol=atol)
    if placements[0] == Shard(0) or placements[-1] == Shard(0):
        assert Shard(0) in got_placements, got_placements  # the batch dim was not gathered


def test_a_transformed_dim_is_never_left_sharded():
    # The input sharded along the transformed dim: the bridge must gather it (only the other dims
    # may stay sharded); the values are torch's.
    x = input_of("complex", torch.complex128)
    want, want_grad = reference(lambda t: torch.fft.fft(t, dim=2), x)
    placements, got, got_grad = on_mesh(lambda t: torch.fft.fft(t, dim=2), x, (2, 2), [Shard(2), Shard(0)])
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-10, atol=1e-10)
    assert Shard(2) not in placements, placements


def test_bad_arguments_name_the_op():
    def rank(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(REAL.clone(), mesh, [Shard(0)])
        with pytest.raises(Exception, match="_fft_c2c|complex"):
            torch.ops.aten._fft_c2c(x, [1], 0, True)  # a real input
        return True

    assert all(dtensor.run_threads(2, rank))
