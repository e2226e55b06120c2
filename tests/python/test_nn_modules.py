# torch.nn's modules through dtensor.bridge, a forward and backward each with the batch sharded
# (3 rows on 2 ranks: uneven) and the parameters replicated (parallelize_module with no plan), against
# the same module on one device (float64): the output, every parameter's gradient and the buffers.
# Recurrent layers (LSTM, GRU, RNN, cells), nn.Transformer with a causal mask, MultiheadAttention,
# convolutions, normalizations (SyncBatchNorm included: dtensor's batch statistics are global),
# embeddings (max_norm renormalizes rows in place: ATen's embedding_renorm_, refused before), pooling,
# upsampling, Bilinear, PReLU.
import copy

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dtensor  # noqa: E402
from dtensor import Replicate, Shard, bridge  # noqa: E402

B = 3


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _ids(*shape, seed):
    return torch.randint(0, 10, shape, generator=torch.Generator().manual_seed(seed))


# name -> (module, inputs)
MODULES = {
    "LSTM": (lambda: nn.LSTM(5, 6, num_layers=2, bidirectional=True, batch_first=True), lambda: (_randn(B, 4, 5, seed=1),)),
    "GRU": (lambda: nn.GRU(5, 6, batch_first=True), lambda: (_randn(B, 4, 5, seed=2),)),
    "RNN": (lambda: nn.RNN(5, 6, nonlinearity="relu", batch_first=True), lambda: (_randn(B, 4, 5, seed=3),)),
    "LSTMCell": (lambda: nn.LSTMCell(5, 6), lambda: (_randn(B, 5, seed=4),)),
    "Transformer": (lambda: nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                                           dim_feedforward=16, dropout=0.0, batch_first=True),
                    lambda: (_randn(B, 5, 8, seed=5), _randn(B, 4, 8, seed=6))),
    "TransformerEncoderLayer": (lambda: nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True,
                                                                   norm_first=True), lambda: (_randn(B, 5, 8, seed=7),)),
    "MultiheadAttention": (lambda: nn.MultiheadAttention(8, 2, batch_first=True),
                           lambda: (_randn(B, 5, 8, seed=8), _randn(B, 5, 8, seed=9), _randn(B, 5, 8, seed=10))),
    "Embedding-max_norm": (lambda: nn.Embedding(10, 4, max_norm=1.0, padding_idx=0), lambda: (_ids(B, 6, seed=11),)),
    "EmbeddingBag": (lambda: nn.EmbeddingBag(10, 4, mode="mean"), lambda: (_ids(B, 6, seed=12),)),
    "Conv1d": (lambda: nn.Conv1d(3, 4, 3, padding=1), lambda: (_randn(B, 3, 7, seed=13),)),
    "Conv3d": (lambda: nn.Conv3d(2, 3, 2), lambda: (_randn(B, 2, 4, 4, 4, seed=14),)),
    "ConvTranspose2d": (lambda: nn.ConvTranspose2d(3, 2, 3, stride=2, output_padding=1), lambda: (_randn(B, 3, 4, 4, seed=15),)),
    "GroupNorm": (lambda: nn.GroupNorm(2, 4), lambda: (_randn(B, 4, 3, 3, seed=16),)),
    "InstanceNorm2d": (lambda: nn.InstanceNorm2d(4, affine=True, track_running_stats=True), lambda: (_randn(B, 4, 3, 3, seed=17),)),
    "RMSNorm": (lambda: nn.RMSNorm(6), lambda: (_randn(B, 4, 6, seed=18),)),
    "SyncBatchNorm": (lambda: nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Conv2d(2, 4, 1), nn.BatchNorm2d(4))),
                      lambda: (_randn(B, 2, 3, 3, seed=19),)),
    "BatchNorm1d-eval": (lambda: nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4)).eval(), lambda: (_randn(B, 3, seed=20),)),
    "PixelShuffle": (lambda: nn.Sequential(nn.Conv2d(2, 8, 1), nn.PixelShuffle(2)), lambda: (_randn(B, 2, 3, 3, seed=21),)),
    "Upsample-bilinear": (lambda: nn.Sequential(nn.Conv2d(2, 2, 1), nn.Upsample(scale_factor=2, mode="bilinear")),
                          lambda: (_randn(B, 2, 3, 3, seed=22),)),
    "LocalResponseNorm": (lambda: nn.Sequential(nn.Conv2d(2, 4, 1), nn.LocalResponseNorm(2)), lambda: (_randn(B, 2, 3, 3, seed=23),)),
    "AdaptiveMaxPool2d": (lambda: nn.Sequential(nn.Conv2d(2, 2, 1), nn.AdaptiveMaxPool2d(2)), lambda: (_randn(B, 2, 5, 5, seed=24),)),
    "Bilinear": (lambda: nn.Bilinear(3, 4, 5), lambda: (_randn(B, 3, seed=25), _randn(B, 4, seed=26))),
    "PReLU": (lambda: nn.Sequential(nn.Linear(3, 4), nn.PReLU(4)), lambda: (_randn(B, 3, seed=27),)),
}


def _forward(name, m, inputs):
    if name == "MultiheadAttention":
        q, k, v = inputs
        return m(q, k, v, attn_mask=torch.triu(torch.ones(q.shape[1], q.shape[1], dtype=torch.bool), 1))[0]
    if name == "Transformer":
        src, tgt = inputs
        mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], dtype=torch.float64)
        return m(src, tgt, tgt_mask=mask, tgt_is_causal=True)
    out = m(*inputs)
    return out[0] if isinstance(out, tuple) else out


def _step(name, m, inputs):
    out = _forward(name, m, inputs)
    (out * out).sum().backward()
    return [out.detach()] + [p.grad for p in m.parameters()] + [b for b in m.buffers()]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_forward_and_backward_match_torch(name):
    make, inputs = MODULES[name]
    torch.manual_seed(0)
    model = make().double()
    xs = inputs()
    want = _step(name, copy.deepcopy(model), xs)

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        m = bridge.parallelize_module(copy.deepcopy(model), mesh, {})
        got = _step(name, m, tuple(bridge.distribute(x, mesh, [Shard(0)]) for x in xs))
        return [t.full_tensor() if isinstance(t, bridge.DTensor) else t for t in got]

    for got in dtensor.run_threads(2, rank):
        assert len(got) == len(want)
        for i, (g, w) in enumerate(zip(got, want)):
            assert (g is None) == (w is None), i
            if w is not None:
                torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, msg=lambda m, i=i: f"result {i}: {m}")


@pytest.mark.parametrize("place", [Replicate(), Shard(0), Shard(1)], ids=["R", "S0", "S1"])
def test_embedding_max_norm_renormalizes_a_sharded_weight_as_torch(place):
    # rows 1, 4 and 9 (named twice, by different ranks' blocks of the indices) exceed max_norm; the
    # others stay as they are. The weight sharded by rows or by columns (a row's norm then spans ranks).
    weight = _randn(10, 4, seed=30)
    weight[[1, 4, 9]] *= 5
    ids = torch.tensor([[1, 4, 9], [9, 2, 1], [4, 4, 0]])
    want = weight.clone()
    nn.functional.embedding(ids, want, max_norm=2.0, norm_type=3.0)
    assert not torch.equal(want, weight)  # the rows changed

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        w = bridge.distribute(weight.clone(), mesh, [place])
        out = nn.functional.embedding(bridge.distribute(ids, mesh, [Shard(0)]), w, max_norm=2.0, norm_type=3.0)
        return w.full_tensor(), out.full_tensor()

    for w, out in dtensor.run_threads(2, rank):
        torch.testing.assert_close(w, want, rtol=1e-14, atol=0)
        torch.testing.assert_close(out, want[ids], rtol=1e-14, atol=0)
