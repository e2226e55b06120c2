# Losses with no dtensor op through the bridge, against torch on one device. F.multi_margin_loss
# and F.multilabel_margin_loss: forward by torch's own decompositions, backward
# (multi_margin_loss_backward, multilabel_margin_loss_backward) by torch's kernels on batch blocks
# (torch_bridge._margin_loss_backward): values and input gradients for every reduction, p 1 and 2,
# class weights, on a [2, 2] thread mesh with the batch sharded (unevenly too), the classes sharded,
# a Partial input, and a 1-d (single-sample) input. 'mean' over a sharded batch must divide by the
# global batch size. F.ctc_loss: _ctc_loss and _ctc_loss_backward computed whole on every rank.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

F = torch.nn.functional
# (input placements, target placements) on a [2, 2] mesh; input [N, C], target [N] or [N, C].
LAYOUTS = {
    "batch": ([Shard(0), Replicate()], [Shard(0), Replicate()]),
    "batch_both_mesh_dims": ([Shard(0), Shard(0)], [Shard(0), Shard(0)]),
    "batch_and_classes": ([Shard(0), Shard(1)], [Replicate(), Shard(0)]),
    "classes": ([Replicate(), Shard(1)], [Replicate(), Replicate()]),
    "partial_input": ([Partial(), Replicate()], [Replicate(), Shard(0)]),
}
N, C = 3, 4  # 3 rows over 2 or 4 ranks: uneven blocks, an empty one on 4 (S(0), S(0): 1 -> 1, 0)


def inputs(seed, multilabel, n=N):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, C, dtype=torch.float64, generator=g)
    if multilabel:  # each row: some class indices, then -1 (the rest ignored)
        t = torch.randint(0, C, (n, C), generator=g)
        t[:, 2:] = -1
        t[0, 1] = -1
    else:
        t = torch.randint(0, C, (n,), generator=g)
    return x, t


def loss(multilabel, x, t, reduction, p, weight):
    if multilabel:
        return F.multilabel_margin_loss(x, t, reduction=reduction)
    return F.multi_margin_loss(x, t, p=p, margin=0.75, weight=weight, reduction=reduction)


def run(layout, multilabel, reduction, p, weighted, x, t):
    x_pl, t_pl = LAYOUTS[layout] if x.dim() == 2 else ([Replicate(), Shard(0)], [Replicate(), Replicate()])
    w = torch.linspace(0.5, 2.0, C, dtype=torch.float64) if weighted else None

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        if any(q.is_partial() for q in x_pl):  # Partial on mesh dim 0: pieces x / 4 and 3 x / 4
            piece = x * (2 * mesh.get_coordinate()[0] + 1) / 4
            xi = bridge.from_local(piece, mesh, x_pl, shape=x.shape)
        else:
            xi = bridge.distribute(x, mesh, x_pl)
        xi.requires_grad_()
        ti = bridge.distribute(t, mesh, t_pl)
        wi = None if w is None else bridge.distribute(w, mesh, [Replicate(), Shard(0)])
        out = loss(multilabel, xi, ti, reduction, p, wi)
        seed = torch.linspace(-1.0, 2.0, max(out.numel(), 1), dtype=torch.float64).reshape(out.shape)
        (out * bridge.distribute(seed, mesh, [Replicate(), Replicate()])).sum().backward()
        return out.full_tensor(), xi.grad.full_tensor()

    xr = x.clone().requires_grad_()
    want = loss(multilabel, xr, t, reduction, p, w)
    seed = torch.linspace(-1.0, 2.0, max(want.numel(), 1), dtype=torch.float64).reshape(want.shape)
    (want * seed).sum().backward()
    for out, gx in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gx, xr.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("p,weighted", [(1, False), (2, True)])
def test_multi_margin_loss_matches_torch(layout, reduction, p, weighted):
    x, t = inputs(hash((layout, reduction, p)) % 1000, False)
    run(layout, False, reduction, p, weighted, x, t)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_multilabel_margin_loss_matches_torch(layout, reduction):
    x, t = inputs(hash((layout, reduction)) % 1000, True)
    run(layout, True, reduction, 1, False, x, t)


@pytest.mark.parametrize("multilabel", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_single_sample_matches_torch(multilabel, reduction):
    # a 1-d input is one sample (its classes sharded here): no batch dim to split, computed whole
    x, t = inputs(3, multilabel, n=1)
    x, t = x[0], (t[0] if multilabel else t)
    run(None, multilabel, reduction, 1, False, x, t)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("concatenated", [False, True])
def test_ctc_loss_matches_torch(reduction, concatenated):
    g = torch.Generator().manual_seed(11)
    T, n, classes, S = 12, 3, 5, 4
    logp = torch.randn(T, n, classes, dtype=torch.float64, generator=g).log_softmax(2)
    targets = torch.randint(1, classes, (n, S), generator=g)
    in_len, tg_len = torch.tensor([12, 10, 7]), torch.tensor([4, 2, 3])
    if concatenated:  # 1-d: each sample's targets one after another
        targets = torch.cat([targets[i, :tg_len[i]] for i in range(n)])
    lr = logp.clone().requires_grad_()
    want = F.ctc_loss(lr, targets, in_len, tg_len, reduction=reduction)
    (want * 1.5).sum().backward()

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        li = bridge.distribute(logp, mesh, [Shard(1), Shard(2)]).requires_grad_()
        ti = bridge.distribute(targets, mesh, [Shard(0), Replicate()])
        out = F.ctc_loss(li, ti, bridge.distribute(in_len, mesh, [Replicate(), Shard(0)]),
                         bridge.distribute(tg_len, mesh, [Replicate(), Replicate()]), reduction=reduction)
        (out * 1.5).sum().backward()
        return out.full_tensor(), li.grad.full_tensor()

    for out, gl in dt.run_threads(4, fn):
        torch.testing.assert_close(out, want.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(gl, lr.grad, rtol=1e-12, atol=1e-12)
