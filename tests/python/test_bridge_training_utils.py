# torch's training utilities on bridge parameters, against the same calls on one device (float64):
# gradient clipping by every norm, torch.amp.GradScaler (unscale_, with an inf on one rank's block),
# an EMA model (torch.optim.swa_utils.AveragedModel: copy.deepcopy of the model), parameters_to_vector
# / vector_to_parameters (`param.data = ...`), weight_norm (both APIs) and spectral_norm
# parametrizations, LBFGS, LR schedulers. Parameters are sharded on either dim (7 rows: uneven) or
# replicated, the batch sharded, with and without keep_grad_layout. Found by running them: GradScaler,
# AveragedModel, weight_norm's backward and spectral_norm were refused or raised, and
# vector_to_parameters left every parameter unchanged without an error.
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dtensor  # noqa: E402
from dtensor import Replicate, Shard, bridge  # noqa: E402

PLACES = {"0.weight": Shard(0), "0.bias": Replicate(), "2.weight": Shard(1), "2.bias": Shard(0)}
_g = torch.Generator().manual_seed(3)
X, Y = torch.randn(9, 6, generator=_g, dtype=torch.float64), torch.randn(9, 5, generator=_g, dtype=torch.float64)


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 7), nn.Tanh(), nn.Linear(7, 5)).double()


def _loss(m, x, y):
    return ((m(x) - y) ** 2).mean()


def clip_norms(m, x, y):
    out = []
    for norm_type, foreach in ((2.0, False), (3.0, True), (float("inf"), False), (1.0, True)):
        m.zero_grad()
        _loss(m, x, y).backward()
        out.append(torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05, norm_type=norm_type, foreach=foreach,
                                                  error_if_nonfinite=True))
        out += [p.grad for p in m.parameters()]
    return out


def grad_scaler(m, x, y):
    # the second step's gradient holds an inf in one element of a sharded gradient (one rank's block):
    # every rank must skip that step and halve the scale
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 10)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    scales = []
    for step in range(3):
        scaler.scale(_loss(m, x, y)).backward()
        if step == 1:
            with torch.no_grad():
                m[0].weight.grad.index_fill_(0, torch.tensor([6]), float("inf"))
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        scales.append(torch.tensor(scaler.get_scale(), dtype=torch.float64))
        opt.zero_grad()
    return scales + list(m.parameters())


def ema(m, x, y):
    averaged = torch.optim.swa_utils.AveragedModel(m, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(0.9))
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    for _ in range(3):
        _loss(m, x, y).backward()
        opt.step()
        opt.zero_grad()
        averaged.update_parameters(m)
    return list(averaged.module.parameters()) + list(m.parameters())


def flat_vector(m, x, y):
    v = torch.nn.utils.parameters_to_vector(m.parameters())
    torch.nn.utils.vector_to_parameters(v * 2 + 1, m.parameters())
    return [v, _loss(m, x, y)] + list(m.parameters())


def weight_norms(m, x, y):
    m[0] = nn.utils.parametrizations.weight_norm(m[0])
    m[2] = nn.utils.weight_norm(m[2], dim=1)
    _loss(m, x, y).backward()
    return [p.grad for p in m.parameters()]


def spectral_norm(m, x, y):
    # the power iteration starts from a random vector (torch's draw and the bridge's differ): after
    # its iterations both are at the largest singular value to ~1e-11
    m[0] = nn.utils.parametrizations.spectral_norm(m[0], n_power_iterations=30)
    return [m(x)]


def lbfgs(m, x, y):
    opt = torch.optim.LBFGS(m.parameters(), lr=0.5, max_iter=4)

    def closure():
        opt.zero_grad()
        loss = _loss(m, x, y)
        loss.backward()
        return loss

    opt.step(closure)
    return list(m.parameters())


def schedulers(m, x, y):
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    cycle = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=5)
    plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(torch.optim.SGD(m.parameters(), lr=0.1))
    for _ in range(3):
        loss = _loss(m, x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        cycle.step()
        plateau.step(loss.detach())
    return list(m.parameters())


CASES = {f.__name__: (f, tol) for f, tol in ((clip_norms, 1e-12), (grad_scaler, 1e-12), (ema, 1e-12),
                                             (flat_vector, 1e-12), (weight_norms, 1e-12), (spectral_norm, 1e-9),
                                             (lbfgs, 1e-12), (schedulers, 1e-12))}


@pytest.mark.parametrize("keep", [True, False], ids=["grads kept", "grads as computed"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_training_utility_matches_torch(name, keep):
    f, tol = CASES[name]
    model = _model()
    want = [t.detach() for t in f(copy.deepcopy(model), X, Y)]

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        m = copy.deepcopy(model)
        for pname, p in list(m.named_parameters()):
            owner, attr = pname.split(".")
            q = nn.Parameter(bridge.distribute(p.detach().clone(), mesh, [PLACES[pname]]))
            setattr(m[int(owner)], attr, bridge.keep_grad_layout(q) if keep else q)
        got = f(m, bridge.distribute(X, mesh, [Shard(0)]), bridge.distribute(Y, mesh, [Shard(0)]))
        return [t.detach().full_tensor() if isinstance(t, bridge.DTensor) else t.detach() for t in got]

    for got in dtensor.run_threads(2, rank):
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            torch.testing.assert_close(g, w, rtol=tol, atol=tol, msg=lambda m, i=i: f"result {i}: {m}")


def test_grad_scaler_skipped_the_step_with_an_inf():
    # the oracle above compares with torch; this says what torch did: the scale halved once
    scales = grad_scaler(_model(), X, Y)[:3]
    assert [float(s) for s in scales] == [1024.0, 512.0, 512.0]


def test_data_takes_a_bridge_tensor_or_a_plain_one_laid_out_as_the_parameter():
    # `p.data = y`: a bridge y's block, layout and shape; a plain y (the same on every rank) sharded
    # as p is (resize_token_embeddings assigns a plain, larger weight)
    whole = torch.arange(15.0).reshape(5, 3)

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        p = nn.Parameter(bridge.distribute(torch.zeros(4, 3), mesh, [Shard(0)]))
        p.data = whole
        plain = (tuple(p.shape), tuple(p.placements), p.full_tensor())
        p.data = bridge.distribute(torch.ones(6, 3), mesh, [Replicate()])  # torch's set_data: y's shape too
        return plain, (tuple(p.shape), tuple(p.placements), p.full_tensor())

    for plain, bridged in dtensor.run_threads(2, rank):
        assert plain[:2] == ((5, 3), (Shard(0),)) and torch.equal(plain[2], whole)
        assert bridged[:2] == ((6, 3), (Replicate(),)) and torch.equal(bridged[2], torch.ones(6, 3))


def test_module_conversions_and_state_dicts_keep_the_layout():
    # Module.to(dtype) (through `param.data = ...`), load_state_dict from a bridge and from a plain
    # state_dict, and torch.save refused with the ways that work (it raised pickle's TypeError)
    import io

    model = _model()

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))

        def made():
            m = copy.deepcopy(model)
            for pname, p in list(m.named_parameters()):
                owner, attr = pname.split(".")
                setattr(m[int(owner)], attr, nn.Parameter(bridge.distribute(p.detach().clone(), mesh, [PLACES[pname]])))
            return m

        half = made().to(torch.bfloat16)
        out = {"bf16": [(p.dtype, tuple(p.placements), p.full_tensor()) for p in half.parameters()]}
        loaded = made()
        with torch.no_grad():
            for p in loaded.parameters():
                p.zero_()
        loaded.load_state_dict(made().state_dict())
        out["from bridge"] = [p.full_tensor() for p in loaded.parameters()]
        with torch.no_grad():
            for p in loaded.parameters():
                p.zero_()
        loaded.load_state_dict(model.state_dict())
        out["from plain"] = [(tuple(p.placements), p.full_tensor()) for p in loaded.parameters()]
        with pytest.raises(dtensor.DTensorError, match=r"pickling a bridge.DTensor \(7, 6\).*dcp.save"):
            torch.save(made().state_dict(), io.BytesIO())
        return out

    for out in dtensor.run_threads(2, rank):
        for (dtype, places, full), (name, p) in zip(out["bf16"], model.named_parameters()):
            assert dtype == torch.bfloat16 and places == (PLACES[name],)
            assert torch.equal(full, p.detach().to(torch.bfloat16))
        for full, p in zip(out["from bridge"], model.parameters()):
            assert torch.equal(full, p.detach())
        for (places, full), (name, p) in zip(out["from plain"], model.named_parameters()):
            assert places == (PLACES[name],) and torch.equal(full, p.detach())
