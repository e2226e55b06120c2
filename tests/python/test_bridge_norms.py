# nn.LayerNorm and nn.GroupNorm through the bridge (native_layer_norm, native_group_norm and their
# _backward ops, dtensor ops since 2026-11-28), with and without weight and bias (the backward's
# output_mask then leaves those gradients out: None, as ATen returns them): a batch-sharded input
# and a replicated one, values and every gradient against torch on one device.
import pytest

import dtensor
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

MODULES = {
    "layer_norm": lambda: torch.nn.LayerNorm([3, 4], dtype=torch.float64),
    "layer_norm_no_bias": lambda: torch.nn.LayerNorm([3, 4], bias=False, dtype=torch.float64),
    "layer_norm_plain": lambda: torch.nn.LayerNorm([3, 4], elementwise_affine=False, dtype=torch.float64),
    "group_norm": lambda: torch.nn.GroupNorm(3, 6, dtype=torch.float64),
    "group_norm_plain": lambda: torch.nn.GroupNorm(3, 6, affine=False, dtype=torch.float64),
}
SHAPES = {name: (5, 6, 3, 4) if name.startswith("group") else (5, 2, 3, 4) for name in MODULES}


@pytest.mark.parametrize("name", list(MODULES))
def test_norm_module_matches_torch(name):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(SHAPES[name], dtype=torch.float64, generator=g)
    ref = MODULES[name]()
    params = [n for n in ("weight", "bias") if getattr(ref, n) is not None]
    with torch.no_grad():
        for n in params:  # the output_mask leaves out the gradients of the absent ones
            getattr(ref, n).copy_(torch.randn(getattr(ref, n).shape, dtype=torch.float64, generator=g))
    rx = x.clone().requires_grad_()
    want = ref(rx)
    w = torch.randn(want.shape, dtype=torch.float64, generator=g)
    (want * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        got = []
        for placements in ([Shard(0), Replicate()], [Replicate(), Replicate()]):
            m = MODULES[name]()
            m.load_state_dict(ref.state_dict())
            for n in params:
                setattr(m, n, torch.nn.Parameter(bridge.distribute(getattr(m, n).detach(), mesh, [Replicate()] * 2)))
            xs = bridge.distribute(x.clone(), mesh, placements).requires_grad_()
            y = m(xs)
            (y * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
            got.append((list(y.placements), y.full_tensor(), xs.grad.full_tensor(),
                        [getattr(m, n).grad.full_tensor() for n in params]))
        return got

    for rank_got in dtensor.run_threads(4, fn):
        for placements, y, gx, gp in rank_got:
            torch.testing.assert_close(y, want.detach(), rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(gx, rx.grad, rtol=1e-12, atol=1e-12)
            for got_p, n in zip(gp, params):
                torch.testing.assert_close(got_p, getattr(ref, n).grad, rtol=1e-12, atol=1e-12)
        assert rank_got[0][0][0] == Shard(0)  # the batch stays sharded


def test_masked_gradients_are_none_as_atens():
    # ATen's norm backward ops return None for a gradient their output_mask leaves out; so do the
    # bridge's, both where ATen runs on the blocks (layer norm) and where dtensor's kernel does
    # (group norm, which computes every gradient).
    x = torch.randn(4, 6, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    w = torch.ones(6, dtype=torch.float64)
    _, gmean, grstd = torch.ops.aten.native_group_norm(x, w, None, 4, 6, 5, 3, 1e-5)
    _, lmean, lrstd = torch.ops.aten.native_layer_norm(x, [5], None, None, 1e-5)

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        d = lambda t: bridge.distribute(t, mesh, [Shard(0)])  # noqa: E731
        g = torch.ops.aten.native_group_norm_backward(d(x), d(x), d(gmean), d(grstd), w, 4, 6, 5, 3,
                                                      [True, False, False])
        ln = torch.ops.aten.native_layer_norm_backward(d(x), d(x), [5], d(lmean), d(lrstd), None, None,
                                                       [True, False, False])
        return [t is None for t in g[1:] + ln[1:]], g[0].full_tensor(), ln[0].full_tensor()

    want_g = torch.ops.aten.native_group_norm_backward(x, x, gmean, grstd, w, 4, 6, 5, 3, [True, False, False])[0]
    want_l = torch.ops.aten.native_layer_norm_backward(x, x, [5], lmean, lrstd, None, None, [True, False, False])[0]
    for nones, g0, l0 in dtensor.run_threads(2, fn):
        assert nones == [True, True, True, True]
        torch.testing.assert_close(g0, want_g, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(l0, want_l, rtol=1e-12, atol=1e-12)


def test_group_norm_arguments_that_do_not_restate_the_input_are_refused():
    # native_group_norm and its backward check N, C, HxW and group alike (ops/norm/group_norm_args.h).
    aten = torch.ops.aten
    x = torch.randn(2, 6, 5, dtype=torch.float64)
    mean = torch.zeros(2, 3, dtype=torch.float64)

    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        d = bridge.distribute(x, mesh, [Shard(0)])
        m = bridge.distribute(mean, mesh, [Shard(0)])
        with pytest.raises(dtensor.DTensorError, match=r"group 4 for C=6; accepted: a positive group dividing C"):
            aten.native_group_norm(d, None, None, 2, 6, 5, 4, 1e-5)
        with pytest.raises(dtensor.DTensorError, match=r"with N=2, C=6, HxW=4; accepted: input \[N, C, \.\.\.\]"):
            aten.native_group_norm_backward(d, d, m, m, None, 2, 6, 4, 3, [True, False, False])
        with pytest.raises(dtensor.DTensorError, match=r"group 0 for C=6"):
            aten.native_group_norm_backward(d, d, m, m, None, 2, 6, 5, 0, [True, False, False])
        return True

    assert all(dtensor.run_threads(2, fn))
