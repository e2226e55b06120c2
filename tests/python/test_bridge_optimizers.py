# Every torch.optim optimizer through dtensor.bridge, in each implementation torch has for it:
# the single-tensor loop (foreach=False), foreach (the _foreach_* ops: on the blocks of the positions
# that share a layout, per tensor for the rest) and fused (_fused_adam_, _fused_adamw_, _fused_sgd_,
# _fused_adagrad_, run as their single-tensor algorithms). A 2-layer MLP whose parameters are
# sharded on either dim (5 and 7 rows: uneven over 2 ranks) or replicated, the batch sharded,
# trains 3 steps with clip_grad_value_ (or clip_grad_norm_) against torch on one device, float64.
# Seen failing before the bridge ran them: foreach Adam(amsgrad) and Adamax (_foreach_maximum_ has
# no in-place ATen op per tensor), every fused optimizer but AdamW.
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dtensor  # noqa: E402
from dtensor import Replicate, Shard, bridge  # noqa: E402

O = torch.optim
# name -> (constructor, implementations torch offers on CPU)
OPTIMIZERS = {
    "SGD": (lambda ps, **k: O.SGD(ps, lr=0.1, **k), ("loop", "foreach", "fused")),
    "SGD-momentum": (lambda ps, **k: O.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, **k),
                     ("loop", "foreach", "fused")),
    "SGD-nesterov-maximize": (lambda ps, **k: O.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, maximize=True, **k),
                              ("loop", "foreach", "fused")),
    "Adam": (lambda ps, **k: O.Adam(ps, lr=0.01, weight_decay=0.1, **k), ("loop", "foreach", "fused")),
    "Adam-amsgrad": (lambda ps, **k: O.Adam(ps, lr=0.01, amsgrad=True, **k), ("loop", "foreach", "fused")),
    "AdamW": (lambda ps, **k: O.AdamW(ps, lr=0.01, **k), ("loop", "foreach", "fused")),
    "AdamW-amsgrad-maximize": (lambda ps, **k: O.AdamW(ps, lr=0.01, amsgrad=True, maximize=True, **k),
                               ("loop", "foreach", "fused")),
    "Adamax": (lambda ps, **k: O.Adamax(ps, lr=0.01, weight_decay=0.1, **k), ("loop", "foreach")),
    "NAdam": (lambda ps, **k: O.NAdam(ps, lr=0.01, **k), ("loop", "foreach")),
    "RAdam": (lambda ps, **k: O.RAdam(ps, lr=0.01, decoupled_weight_decay=True, weight_decay=0.1, **k),
              ("loop", "foreach")),
    "Adagrad": (lambda ps, **k: O.Adagrad(ps, lr=0.1, lr_decay=0.1, weight_decay=0.01, **k),
                ("loop", "foreach", "fused")),
    "Adadelta": (lambda ps, **k: O.Adadelta(ps, **k), ("loop", "foreach")),
    "RMSprop-centered": (lambda ps, **k: O.RMSprop(ps, lr=0.01, momentum=0.5, centered=True, **k),
                         ("loop", "foreach")),
    "Rprop": (lambda ps, **k: O.Rprop(ps, **k), ("loop", "foreach")),
    "ASGD": (lambda ps, **k: O.ASGD(ps, lr=0.01, **k), ("loop", "foreach")),
    "Adafactor": (lambda ps, **k: O.Adafactor(ps, lr=0.01, **k), ("loop", "foreach")),
}
KWARGS = {"loop": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}
CASES = [(name, impl) for name, (_, impls) in OPTIMIZERS.items() for impl in impls]
PLACES = {"0.weight": Shard(0), "0.bias": Replicate(), "2.weight": Shard(1), "2.bias": Shard(0)}


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 7), nn.Tanh(), nn.Linear(7, 5)).double()


def _train(model, make, impl, x, y, clip="value"):
    opt = make(model.parameters(), **KWARGS[impl])
    for _ in range(3):
        ((model(x) - y) ** 2).mean().backward()
        if clip == "value":
            torch.nn.utils.clip_grad_value_(model.parameters(), 0.05, foreach=impl == "foreach")
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1, foreach=impl == "foreach")
        opt.step()
        opt.zero_grad()
    return [p.detach() for p in model.parameters()]


@pytest.mark.parametrize("grads", ["kept", "as computed"])
@pytest.mark.parametrize("name,impl", CASES)
def test_optimizer_steps_match_torch(name, impl, grads):
    # grads "kept": keep_grad_layout moves each gradient to its parameter's layout (what
    # parallelize_module registers); "as computed": plain Parameters, whose gradients keep the
    # layout the backward chose (Partial, or another shard), so the optimizer's state and the
    # _foreach_* lists mix layouts at one position and run per tensor.
    make = OPTIMIZERS[name][0]
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(9, 6, generator=g, dtype=torch.float64), torch.randn(9, 5, generator=g, dtype=torch.float64)
    clip = "norm" if name.startswith("Adam") else "value"
    model = _model()
    want = _train(copy.deepcopy(model), make, impl, x, y, clip)

    def rank(world):  # one model copied: the ranks are threads of one process, with one torch generator
        mesh = dtensor.init_device_mesh("cpu", (2,))
        m = copy.deepcopy(model)
        for pname, p in list(m.named_parameters()):
            owner, attr = pname.split(".")
            param = nn.Parameter(bridge.distribute(p.detach().clone(), mesh, [PLACES[pname]]))
            setattr(m[int(owner)], attr, bridge.keep_grad_layout(param) if grads == "kept" else param)
        got = _train(m, make, impl, bridge.distribute(x, mesh, [Shard(0)]), bridge.distribute(y, mesh, [Shard(0)]), clip)
        return [p.full_tensor() for p in got]

    for got in dtensor.run_threads(2, rank):
        for pname, g_, w in zip(PLACES, got, want):
            torch.testing.assert_close(g_, w, rtol=1e-12, atol=1e-12, msg=lambda m, n=pname: f"{n}: {m}")
        # the steps moved the parameters: a comparison of two untouched models would pass as well
        assert all(not torch.equal(w, p) for w, p in zip(want, model.parameters()))


def test_powsum_and_foreach_powsum_match_torch():
    # linalg._powsum (sum |x|^ord, no root) and _foreach_powsum have no torch decomposition: the
    # bridge runs abs, pow and sum. Orders 0 (counts every element: 0^0 = 1), fractional, negative
    # (a zero gives inf) and inf; over all dims and over one, with dtype.
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    x[1, 2] = 0.0
    y = torch.randn(7, generator=g, dtype=torch.float64)

    def calls(a, b):
        out = [torch.linalg._powsum(a, o) for o in (0, 1, 2, 3, 0.5, -1, float("inf"))]
        out.append(torch.linalg._powsum(a, 2, dim=1, keepdim=True))
        out.append(torch.linalg._powsum(a, 3, dim=(0,), dtype=torch.float32))
        out.extend(torch._foreach_powsum([a, b], 2))
        return out

    want = calls(x, y)

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        got = calls(bridge.distribute(x, mesh, [Shard(0)]), bridge.distribute(y, mesh, [Shard(0)]))
        return [(t.full_tensor(), t.dtype) for t in got]

    for got in dtensor.run_threads(2, rank):
        assert len(got) == len(want)
        for (g_, dtype), w in zip(got, want):
            assert dtype == w.dtype
            torch.testing.assert_close(g_, w, rtol=1e-12 if w.dtype == torch.float64 else 1e-6, atol=0)


@pytest.mark.parametrize("form", ["Scalar", "ScalarList", "List", "out of place"])
def test_foreach_maximum_and_minimum_per_tensor_match_torch(form):
    # On Partial tensors (x @ w with the contraction sharded) the _foreach ops run per tensor, as
    # maximum / minimum (which have no in-place ATen op) or, with numbers, clamp_min / clamp_max
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(5, 4, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g, dtype=torch.float64)
    calls = {"Scalar": lambda l: torch._foreach_maximum_(l, 0.1) or l,
             "ScalarList": lambda l: torch._foreach_minimum_(l, [0.1, -0.2]) or l,
             "List": lambda l: torch._foreach_maximum_(l, [t * 0.5 for t in l]) or l,
             "out of place": lambda l: torch._foreach_minimum(l, 0.0)}
    want = calls[form]([x @ w, (x @ w) * 2])

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        p = bridge.distribute(x, mesh, [Shard(1)]) @ bridge.distribute(w, mesh, [Shard(0)])
        assert p.placements[0].is_partial()
        return [t.full_tensor() for t in calls[form]([p, p * 2])]

    for got in dtensor.run_threads(2, rank):
        for g_, w_ in zip(got, want):
            torch.testing.assert_close(g_, w_, rtol=1e-12, atol=1e-12)
