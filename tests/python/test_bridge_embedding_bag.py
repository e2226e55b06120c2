# nn.EmbeddingBag through the bridge: ATen's _embedding_bag is a registered op (ops/embedding/
# bag_defs.cc, kernels/cpu/embedding_bag.h) whose kernel the bridge runs, against torch on one
# device: all four outputs (ATen's CPU bookkeeping: offset2bag, bag_size, max_indices) and the
# gradients of the table and of per_sample_weights, for sum / mean / max, padding_idx,
# include_last_offset and empty bags, with the table sharded by columns, by rows (sum and mean: each
# rank adds the rows it holds, a Partial(sum) output) or replicated.
import pytest

import dtensor as dt
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

INDICES = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 7, 7, 3])
OFFSETS = torch.tensor([0, 2, 2, 5, 9])  # bag 1 empty
# (mode, per_sample_weights, padding_idx, include_last_offset)
CASES = [(0, False, -1, False), (0, True, 4, False), (1, False, -1, False), (1, False, 3, True),
         (2, False, -1, False), (2, False, 7, True), (0, True, -1, "short")]
LAYOUTS = {"rows": [Shard(0), Replicate()], "rows_twice": [Shard(0), Shard(0)],
           "columns": [Replicate(), Shard(1)], "rows_and_columns": [Shard(0), Shard(1)],
           "replicated": [Replicate(), Replicate()]}


def call(w, psw, mode, pad, last):
    # "short": include_last_offset with a last offset before the end, which ATen ignores (its last
    # bag runs to the end: a reproducer, the first kernel stopped there).
    offsets = torch.cat([OFFSETS, torch.tensor([len(INDICES) - (3 if last == "short" else 0)])]) if last else OFFSETS
    return torch.ops.aten._embedding_bag(w, INDICES, offsets, False, mode, False, psw, bool(last), pad)


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_embedding_bag_matches_torch(case, layout):
    mode, weighted, pad, last = CASES[case]
    g = torch.Generator().manual_seed(case)
    w = torch.randn(10, 6, dtype=torch.float64, generator=g)
    psw = torch.rand(len(INDICES), dtype=torch.float64, generator=g) if weighted else None
    grad_out = torch.randn(len(OFFSETS), 6, dtype=torch.float64, generator=g)
    w_ref = w.clone().requires_grad_()
    p_ref = psw.clone().requires_grad_() if weighted else None
    want = call(w_ref, p_ref, mode, pad, last)
    (want[0] * grad_out).sum().backward()
    placements = LAYOUTS[layout]
    if mode == 2 and layout.startswith("rows"):
        placements = [Replicate() if p.is_shard() and p.dim == 0 else p for p in placements]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        wd = bridge.distribute(w, mesh, placements).requires_grad_()
        pd = bridge.distribute(psw, mesh, [Replicate(), Replicate()]).requires_grad_() if weighted else None
        got = call(wd, pd, mode, pad, last)
        (got[0] * bridge.distribute(grad_out, mesh, [p if p.is_shard() else Replicate() for p in got[0].placements])
         ).sum().backward()
        return ([t.full_tensor() for t in got], wd.grad.full_tensor(), pd.grad.full_tensor() if weighted else None,
                tuple(got[0].placements))

    for outs, w_grad, p_grad, out_placements in dt.run_threads(4, fn):
        for k, (a, b) in enumerate(zip(outs, want)):
            assert a.dtype == b.dtype and a.shape == b.shape, (k, a.dtype, b.dtype, a.shape, b.shape)
            torch.testing.assert_close(a, b.detach(), rtol=1e-12, atol=1e-12, msg=lambda m: f"output {k}: {m}")
        torch.testing.assert_close(w_grad, w_ref.grad, rtol=1e-12, atol=1e-12)
        if weighted:
            torch.testing.assert_close(p_grad, p_ref.grad, rtol=1e-12, atol=1e-12)
        if layout == "rows" and mode != 2:  # each rank adds the rows it holds: no gather of the table
            assert out_placements[0].is_partial(), out_placements


def test_embedding_bag_errors_name_the_op():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        w = bridge.distribute(torch.randn(10, 4, dtype=torch.float64), mesh, [Shard(1)])
        with pytest.raises(dt.DTensorError, match="_embedding_bag.*mode 5"):
            torch.ops.aten._embedding_bag(w, INDICES, OFFSETS, False, 5)
        with pytest.raises(dt.DTensorError, match="_embedding_bag.*per_sample_weights"):
            torch.ops.aten._embedding_bag(w, INDICES, OFFSETS, False, 1, False,
                                          bridge.distribute(torch.ones(len(INDICES), dtype=torch.float64), mesh, [Replicate()]))
        with pytest.raises(dt.DTensorError, match="index 12 out of range"):
            torch.ops.aten._embedding_bag(w, torch.tensor([1, 12]), torch.tensor([0]), False, 0)
        return True

    assert all(dt.run_threads(2, fn))
