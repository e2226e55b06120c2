# Vision models through dtensor.bridge: convolution and its backward run on dtensor's engine
# (ops/conv). torchvision's VisionTransformer (patch convolution, nn.MultiheadAttention, MLP) trains
# data- and tensor-parallel (dp=2 x tp=2) as single-device PyTorch does (float64, 20 steps of AdamW
# with clip_grad_norm_); a convolution without bias, its weight sharded over output channels, gives
# torch's gradients, the input's included (convolution_backward's output mask, None where masked).
import copy

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")

import dtensor  # noqa: E402
from dtensor import Replicate, Shard, bridge  # noqa: E402

torch.set_num_threads(1)


def _train(model, x, y, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad()
        loss = loss.detach()
        losses.append(float(loss.full_tensor() if isinstance(loss, bridge.DTensor) else loss))
    return losses


def test_vit_trains_data_and_tensor_parallel_as_torch():
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(image_size=16, patch_size=4, num_layers=2, num_heads=4,
                                                 hidden_dim=32, mlp_dim=64, num_classes=10).double()
    x = torch.randn(4, 3, 16, 16, dtype=torch.float64)
    y = torch.randint(0, 10, (4,))
    ref = copy.deepcopy(model).train()
    want = _train(ref, x, y, 20)
    plan = {"encoder.layers.*.mlp.0": ColwiseParallel(), "encoder.layers.*.mlp.3": RowwiseParallel()}

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        m = bridge.parallelize_module(copy.deepcopy(model).train(), mesh, plan)
        losses = _train(m, bridge.distribute(x, mesh, [Shard(0), Replicate()]),
                        bridge.distribute(y, mesh, [Shard(0), Replicate()]), 20)
        return losses, {n: p.full_tensor().detach() for n, p in m.named_parameters()}

    for losses, params in dtensor.run_threads(4, rank):
        assert losses == pytest.approx(want, rel=1e-12) and want[-1] < want[0]
        for n, p in ref.named_parameters():
            torch.testing.assert_close(params[n], p.detach(), rtol=0, atol=1e-11, msg=n)


def test_output_channel_sharded_convolution_without_bias_gives_torchs_gradients():
    torch.manual_seed(1)
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, bias=False).double()
    x = torch.randn(3, 4, 9, 8, dtype=torch.float64, requires_grad=True)
    conv(x).square().sum().backward()

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        c = copy.deepcopy(conv)
        c.weight = torch.nn.Parameter(bridge.distribute(conv.weight.detach(), mesh, [Shard(0)]))
        dx = bridge.distribute(x.detach(), mesh, [Replicate()]).requires_grad_()
        out = c(dx)
        out.square().sum().backward()
        # ATen's own call with a mask: None where masked off, as ATen returns it.
        masked = torch.ops.aten.convolution_backward(out.detach(), dx.detach(), c.weight.detach(), None, [2, 2], [1, 1],
                                                     [1, 1], False, [0, 0], 1, [False, True, False])
        return out.placements, dx.grad.full_tensor(), c.weight.grad.full_tensor(), [m is None for m in masked]

    for placements, gx, gw, none in dtensor.run_threads(2, rank):
        assert none == [True, False, True]
        assert placements == (Shard(1),)  # output channels stay sharded: no collective in the forward
        torch.testing.assert_close(gx, x.grad, rtol=0, atol=1e-12)
        torch.testing.assert_close(gw, conv.weight.grad, rtol=0, atol=1e-12)
