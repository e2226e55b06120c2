# Adaptive average pooling through the bridge (ops/pooling): F.adaptive_avg_pool1d/2d/3d on a bridge
# DTensor sharded on the batch, the channels and a spatial dim, forward and gradient against torch on
# one device. The 1-d op reaches dispatch as the 2-d one (ATen's composite); the 2-d and 3-d ones as
# _adaptive_avg_pool2d/3d and their _backward ops, which dtensor runs (the 3-d ones had no rule and
# no torch._decomp decomposition before: UnsupportedOpError).
import pytest

import dtensor
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

F = torch.nn.functional


@pytest.mark.parametrize("dims,out", [(1, 3), (2, (3, 2)), (3, (2, 3, 1))])
def test_adaptive_avg_pool_matches_torch(dims, out):
    pool = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}[dims]
    x = torch.randn([5, 3, 7, 5, 4][:dims + 2], dtype=torch.float64, generator=torch.Generator().manual_seed(dims))
    want = pool(x, out)
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    ref = x.clone().requires_grad_()
    (pool(ref, out) * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        got = []
        for placements in ([Shard(0), Shard(1)], [Shard(2), Replicate()]):  # batch, channels; spatial
            xs = bridge.distribute(x.clone(), mesh, placements).requires_grad_()
            y = pool(xs, out)
            (y * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
            got.append((y.full_tensor(), xs.grad.full_tensor()))
        return got

    for rank_got in dtensor.run_threads(4, fn):
        for y, g in rank_got:
            torch.testing.assert_close(y, want, rtol=1e-14, atol=1e-14)
            torch.testing.assert_close(g, ref.grad, rtol=1e-14, atol=1e-14)
