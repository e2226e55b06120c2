# torch.stft through the bridge (ATen's stft unsqueezes a 1-d signal, then frames it with as_strided
# and transposes in place with transpose_) against torch on one device on a [2, 2] thread mesh:
# values and gradients for sharded, Partial and batched signals. Under it: as_strided of a bridge
# view that holds its base's elements in storage order (unsqueeze, view) runs as of the base, one
# in another order (a transpose, a slice) is still refused naming the op; transpose_ (its
# out-of-place form is transpose.int) makes the tensor the transposed view, as torch's.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402
from dtensor.torch_bridge import UnsupportedOpError  # noqa: E402

STFT = [dict(n_fft=8, hop_length=3, return_complex=True),
        dict(n_fft=6, hop_length=2, window="hann", center=False, return_complex=True),
        dict(n_fft=10, hop_length=4, onesided=False, normalized=True, return_complex=True)]


def _distribute(x, mesh, pl):
    if any(p.is_partial() for p in pl):
        rank = mesh.get_coordinate()[0]
        return bridge.from_local(x * (0.5 if rank == 0 else 0.5), mesh, pl, shape=x.shape)
    return bridge.distribute(x, mesh, pl)


@pytest.mark.parametrize("case", range(len(STFT)))
@pytest.mark.parametrize("shape, pl", [((40,), [Shard(0), Replicate()]), ((40,), [Partial(), Replicate()]),
                                       ((3, 30), [Shard(0), Shard(1)])])
def test_stft_matches_torch(case, shape, pl):
    kw = dict(STFT[case])
    g = torch.Generator().manual_seed(case)
    x = torch.randn(shape, dtype=torch.float64, generator=g)
    if kw.get("window") == "hann":
        kw["window"] = torch.hann_window(kw["n_fft"], dtype=torch.float64)
    xr = x.clone().requires_grad_()
    want = torch.stft(xr, **kw)
    w = torch.randn(*want.shape, 2, dtype=torch.float64, generator=g)
    (torch.view_as_real(want) * w).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xi = _distribute(x, mesh, pl).requires_grad_()
        args = dict(kw)
        if "window" in args:
            args["window"] = bridge.distribute(args["window"], mesh, [Replicate(), Replicate()])
        out = torch.stft(xi, **args)
        (torch.view_as_real(out) * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
        return out.full_tensor(), xi.grad.full_tensor()

    for out, gx in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-12, atol=1e-12)


def test_as_strided_of_views():
    x = torch.arange(24, dtype=torch.float64).reshape(4, 6)
    frames = ((3, 4), (5, 2), 1)
    want = x.unsqueeze(0).as_strided((1, *frames[0]), (24, *frames[1]), frames[2])

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        xi = bridge.distribute(x, mesh, [Shard(0), Shard(1)])
        got = xi.unsqueeze(0).as_strided((1, *frames[0]), (24, *frames[1]), frames[2]).full_tensor()
        flat = xi.view(24).as_strided((4,), (5,), 2).full_tensor()
        for view in (xi.t(), xi[1:3]):  # elements not in storage order: refused
            with pytest.raises(UnsupportedOpError, match=r"as_strided.*of a view.*\.clone\(\) it first"):
                view.as_strided((2, 2), (1, 2), 0)
        y = bridge.distribute(x, mesh, [Shard(1), Replicate()])
        y.transpose_(0, 1)
        return got, flat, tuple(y.shape), y.full_tensor()

    for got, flat, shape, t in dt.run_threads(4, fn):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(flat, x.reshape(24).as_strided((4,), (5,), 2), rtol=0, atol=0)
        assert shape == (6, 4)
        torch.testing.assert_close(t, x.t(), rtol=0, atol=0)
