# nn.LayerNorm and nn.GroupNorm through the bridge (native_layer_norm and native_group_norm, dtensor
# ops since 2026-11-28; their backward ops run as torch's decompositions over the mean and rstd the
# forward returns): a batch-sharded input and a replicated one, values and the input, weight and
# bias gradients against torch on one device.
import pytest

import dtensor
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

MODULES = {
    "layer_norm": lambda: torch.nn.LayerNorm([3, 4], dtype=torch.float64),
    "group_norm": lambda: torch.nn.GroupNorm(3, 6, dtype=torch.float64),
}
SHAPES = {"layer_norm": (5, 2, 3, 4), "group_norm": (5, 6, 3, 4)}


@pytest.mark.parametrize("name", list(MODULES))
def test_norm_module_matches_torch(name):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(SHAPES[name], dtype=torch.float64, generator=g)
    ref = MODULES[name]()
    with torch.no_grad():
        ref.weight.copy_(torch.randn(ref.weight.shape, dtype=torch.float64, generator=g))
        ref.bias.copy_(torch.randn(ref.bias.shape, dtype=torch.float64, generator=g))
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
            m.weight = torch.nn.Parameter(bridge.distribute(m.weight.detach(), mesh, [Replicate(), Replicate()]))
            m.bias = torch.nn.Parameter(bridge.distribute(m.bias.detach(), mesh, [Replicate(), Replicate()]))
            xs = bridge.distribute(x.clone(), mesh, placements).requires_grad_()
            y = m(xs)
            (y * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
            got.append((list(y.placements), y.full_tensor(), xs.grad.full_tensor(), m.weight.grad.full_tensor(),
                        m.bias.grad.full_tensor()))
        return got

    for rank_got in dtensor.run_threads(4, fn):
        for placements, y, gx, gw, gb in rank_got:
            torch.testing.assert_close(y, want.detach(), rtol=1e-13, atol=1e-13)
            torch.testing.assert_close(gx, rx.grad, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(gw, ref.weight.grad, rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(gb, ref.bias.grad, rtol=1e-12, atol=1e-12)
        assert rank_got[0][0][0] == Shard(0)  # the batch stays sharded
