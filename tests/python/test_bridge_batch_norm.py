# nn.BatchNorm through the bridge: ATen's batch norm forms (native_batch_norm, _native_batch_norm_legit
# and .no_stats, _native_batch_norm_legit_no_training, _batch_norm_with_update / _no_update) run the
# registered op _native_batch_norm_legit_functional (ops/norm/batch_norm_defs.cc), whose new running
# statistics are copied into the module's buffers. Against torch on one device: outputs, the running
# statistics after each step, and every gradient, in training and evaluation, on a channel-sharded,
# a batch- and spatial-sharded (the statistics all-reduced by the step sync_stats: the output keeps
# the input's Shards) and a replicated input.
import math

import pytest

import dtensor as dt
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

MODULES = {
    "bn2d": lambda: torch.nn.BatchNorm2d(4, momentum=0.3, dtype=torch.float64),
    "bn2d_plain": lambda: torch.nn.BatchNorm2d(4, affine=False, dtype=torch.float64),
    "bn1d_no_stats": lambda: torch.nn.BatchNorm1d(4, track_running_stats=False, dtype=torch.float64),
}
# Large enough in N and space that the cost model prefers all-reducing the statistics (C values)
# to moving the input into channel shards.
SHAPES = {"bn2d": (30, 4, 15, 16), "bn2d_plain": (30, 4, 15, 16), "bn1d_no_stats": (63, 4, 255)}
# (input placements, placements of the [C] parameters and buffers) on a [2, 2] mesh.
LAYOUTS = {
    "channels": ([Shard(1), Replicate()], [Shard(0), Replicate()]),
    "batch_and_spatial": ([Shard(0), Shard(2)], [Replicate(), Replicate()]),
    "batch_and_channels": ([Shard(0), Shard(1)], [Replicate(), Shard(0)]),
    "replicated": ([Replicate(), Replicate()], [Replicate(), Replicate()]),
}


def reference(name, x, weights, steps):
    m = MODULES[name]()
    _init(m)
    out = []
    for train, w in zip(steps, weights):
        m.train(train)
        xr = x.clone().requires_grad_()
        y = m(xr)
        (y * w).sum().backward()
        out.append((y.detach(), xr.grad, *[t.detach().clone() for t in _state(m)]))
        m.zero_grad()
    return out


def _init(m):
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for t in (m.weight, m.bias, m.running_mean):
            if t is not None:
                t.copy_(torch.randn(t.shape, dtype=t.dtype, generator=g))
        if m.running_var is not None:
            m.running_var.copy_(torch.rand(m.running_var.shape, dtype=torch.float64, generator=g) + 0.5)


def _state(m):
    """The affine gradients and the running statistics, in a fixed order (absent ones skipped)."""
    return [t for t in (m.weight.grad if m.weight is not None else None, m.bias.grad if m.bias is not None else None,
                        m.running_mean, m.running_var) if t is not None]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(MODULES))
def test_batch_norm_matches_torch(name, layout):
    g = torch.Generator().manual_seed(7)
    x = torch.randn(SHAPES[name], dtype=torch.float64, generator=g)
    steps = [True, True, False] if name != "bn1d_no_stats" else [True, True]
    weights = [torch.randn(x.shape, dtype=torch.float64, generator=g) for _ in steps]
    want = reference(name, x, weights, steps)
    px, pc = LAYOUTS[layout]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        m = MODULES[name]()
        _init(m)
        for n, t in [*m.named_parameters(recurse=False), *m.named_buffers(recurse=False)]:
            if t.dim() == 1:
                d = bridge.distribute(t.detach(), mesh, pc)
                setattr(m, n, torch.nn.Parameter(d) if isinstance(t, torch.nn.Parameter) else None)
                if not isinstance(t, torch.nn.Parameter):
                    m.register_buffer(n, d)
        got = []
        for train, w in zip(steps, weights):
            m.train(train)
            xd = bridge.distribute(x, mesh, px).requires_grad_()
            y = m(xd)
            (y * bridge.distribute(w, mesh, y.placements)).sum().backward()
            got.append((y.full_tensor(), xd.grad.full_tensor(), *[t.full_tensor().clone() for t in _state(m)],
                        tuple(y.placements)))
            m.zero_grad()
        return got

    for rank in dt.run_threads(4, fn):
        for step, (g_step, w_step) in enumerate(zip(rank, want)):
            assert len(g_step) == len(w_step) + 1
            for k, (a, b) in enumerate(zip(g_step, w_step)):
                torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12,
                                           msg=lambda m: f"step {step} ({'train' if steps[step] else 'eval'}) item {k}: {m}")
            # A sharded batch or spatial dim stays sharded (the step all-reduces the statistics).
            if layout == "batch_and_spatial":
                assert g_step[-1] == tuple(px), g_step[-1]


def test_evaluation_without_running_statistics_is_refused_as_by_torch():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.randn(4, 3, dtype=torch.float64), mesh, [Shard(0)])
        with pytest.raises(dt.DTensorError, match="running_mean must be defined in evaluation mode"):
            torch.ops.aten.native_batch_norm(x, None, None, None, None, False, 0.1, 1e-5)
        return True

    assert all(dt.run_threads(2, fn))


# Each ATen form the bridge routes to _native_batch_norm_legit_functional, called directly (export
# and torch._decomp produce the legit ones; nn.BatchNorm reaches native_batch_norm): every output and
# the running statistics after the call, against the same call on plain tensors.
FORMS = {
    "legit_train": lambda a, x, w, b, rm, rv: a._native_batch_norm_legit(x, w, b, rm, rv, True, 0.2, 1e-5),
    "legit_eval": lambda a, x, w, b, rm, rv: a._native_batch_norm_legit(x, w, b, rm, rv, False, 0.2, 1e-5),
    "legit_no_stats": lambda a, x, w, b, rm, rv: a._native_batch_norm_legit.no_stats(x, w, b, True, 0.2, 1e-5),
    "legit_no_training": lambda a, x, w, b, rm, rv: a._native_batch_norm_legit_no_training(x, w, b, rm, rv, 0.2, 1e-5),
    "native_train": lambda a, x, w, b, rm, rv: a.native_batch_norm(x, w, b, rm, rv, True, 0.2, 1e-5),
    "with_update": lambda a, x, w, b, rm, rv: a._batch_norm_with_update(x, w, b, rm, rv, 0.2, 1e-5),
    "no_update": lambda a, x, w, b, rm, rv: a._batch_norm_no_update(x, w, b, rm, rv, 0.2, 1e-5),
}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("layout", ["channels", "batch_and_spatial"])
def test_every_aten_form_matches_torch(form, layout):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(6, 4, 5, dtype=torch.float64, generator=g)
    w, b, rm = (torch.randn(4, dtype=torch.float64, generator=g) for _ in range(3))
    rv = torch.rand(4, dtype=torch.float64, generator=g) + 0.5
    rm_ref, rv_ref = rm.clone(), rv.clone()
    want = FORMS[form](torch.ops.aten, x, w, b, rm_ref, rv_ref)
    px, pc = LAYOUTS[layout]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        c = [bridge.distribute(t, mesh, pc) for t in (w, b, rm, rv)]
        got = FORMS[form](torch.ops.aten, bridge.distribute(x, mesh, px), *c)
        return [t.full_tensor() if isinstance(t, bridge.DTensor) else t for t in got], \
            c[2].full_tensor().clone(), c[3].full_tensor().clone()

    for got, rm_got, rv_got in dt.run_threads(4, fn):
        assert len(got) == len(want)
        for k, (a, e) in enumerate(zip(got, want)):
            assert a.shape == e.shape and a.dtype == e.dtype, (k, a.shape, e.shape, a.dtype, e.dtype)
            torch.testing.assert_close(a, e, rtol=1e-10, atol=1e-12, msg=lambda m: f"{form} output {k}: {m}")
        torch.testing.assert_close(rm_got, rm_ref, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(rv_got, rv_ref, rtol=1e-12, atol=1e-12)
