# dtensor.ops.flex_attention against PyTorch on the same data: torch's scaled_dot_product_attention
# with an explicit mask (bool, or additive for ALiBi) built here from the mask's definition, and a
# plain torch softmax attention for the soft cap; gradients against torch autograd. Sharded on 2
# thread ranks by heads and by batch.
import numpy as np
import pytest
import torch

import dtensor
from dtensor import Replicate, Shard

B, H, N, E = 2, 4, 24, 8
rng = np.random.default_rng(3)
q, k, v = (rng.standard_normal((B, H, N, E)) for _ in range(3))
docs = np.array([[0] * 10 + [1] * 9 + [2] * 5, [0] * 3 + [1] * 21], dtype=np.int64)
slopes = np.array([0.5, 0.25, 0.125, 0.0625])


def visible(causal, window, prefix):
    """[B, 1, N, N] bool: the mask of kernels/cpu/flex_attention.h, written with torch."""
    i = torch.arange(N).view(N, 1)
    j = torch.arange(N).view(1, N)
    d = torch.from_numpy(docs)
    same = d[:, :, None] == d[:, None, :]
    inner = torch.ones(N, N, dtype=torch.bool)
    if causal:
        inner &= j <= i
    if window >= 0:
        inner &= (i - j).abs() <= window
    return (same & (inner | (j < prefix)))[:, None]


def torch_reference(causal, window, prefix, alibi, soft_cap):
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    mask = visible(causal, window, prefix)
    bias = torch.zeros(B, H, N, N, dtype=torch.float64)
    if alibi:
        pos = torch.arange(N, dtype=torch.float64)
        bias = bias + torch.from_numpy(slopes).view(1, H, 1, 1) * (pos.view(1, N) - pos.view(N, 1))
    if soft_cap == 0:
        out = torch.nn.functional.scaled_dot_product_attention(
            tq, tk, tv, attn_mask=bias.masked_fill(~mask, float("-inf")) if alibi else mask)
    else:
        s = tq @ tk.transpose(-1, -2) / np.sqrt(E) + bias
        s = soft_cap * torch.tanh(s / soft_cap)
        out = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1) @ tv
    w = torch.from_numpy(np.cos(np.arange(out.numel())).reshape(out.shape))
    (out * w).sum().backward()
    return out.detach().numpy(), [t.grad.numpy() for t in (tq, tk, tv)], w.numpy()


@pytest.mark.parametrize("causal,window,prefix,alibi,soft_cap", [
    (True, -1, 0, False, 0.0),   # causal documents
    (True, 5, 0, True, 0.0),     # sliding window + ALiBi
    (True, -1, 4, False, 0.0),   # prefix-LM
    (False, -1, 0, True, 2.0),   # ALiBi + tanh soft cap
])
@pytest.mark.parametrize("shard", [1, 0])  # heads, batch
def test_flex_attention_matches_torch_forward_and_backward(causal, window, prefix, alibi, soft_cap, shard):
    want, want_grads, w = torch_reference(causal, window, prefix, alibi, soft_cap)

    def fn(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        dq, dk, dv = (dtensor.distribute_tensor(x, mesh, [Shard(shard)]).requires_grad_() for x in (q, k, v))
        kw = dict(document_ids=dtensor.distribute_tensor(docs, mesh, [Replicate()]), is_causal=causal,
                  window=window, prefix_length=prefix, soft_cap=soft_cap, block_size=8)
        if shard == 0:  # the tile map computed once, passed to the forward and, by autograd, the backward
            kw["block_mask"] = dtensor.ops.create_block_mask(kw["document_ids"], is_causal=causal, window=window,
                                                             prefix_length=prefix, block_size=8)
        if alibi:
            kw["alibi_slopes"] = dtensor.distribute_tensor(slopes, mesh, [Replicate()])
        out = dtensor.ops.flex_attention(dq, dk, dv, **kw)
        loss = dtensor.ops.sum(dtensor.ops.mul(out, dtensor.distribute_tensor(w, mesh, [Replicate()])))
        loss.backward()
        return out.full_tensor(), [t.grad.full_tensor() for t in (dq, dk, dv)], out.placements

    for out, grads, placements in dtensor.run_threads(2, fn):
        assert placements == (Shard(shard),)
        np.testing.assert_allclose(out, want, rtol=1e-9, atol=1e-12)
        for g, t in zip(grads, want_grads):
            np.testing.assert_allclose(g, t, rtol=1e-9, atol=1e-12)
