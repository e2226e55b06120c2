# torch.cdist through the bridge (ops/matrix/distance_defs.cc: _cdist_forward and _cdist_backward,
# which torch's autograd calls for x1 and, operands swapped, for x2): values and both gradients
# against torch on one device, on a [2, 2] mesh with x1's rows, x2's rows, the batch or the columns
# sharded, for p = 0, 1, 1.5, 2, 3 and inf, and with more than 25 rows (torch.cdist's matrix-product
# form, run from torch's _euclidean_dist decomposition).
import math

import pytest

import dtensor
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

LAYOUTS = [([Shard(1), Replicate()], [Replicate(), Shard(1)]),   # x1 rows, x2 rows
           ([Shard(0), Shard(2)], [Shard(0), Shard(2)]),          # batch, columns
           ([Replicate(), Replicate()], [Shard(1), Shard(0)])]


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, 3.0, math.inf])
@pytest.mark.parametrize("rows", [5, 30])
def test_cdist_matches_torch(p, rows):
    g = torch.Generator().manual_seed(rows + (7 if math.isinf(p) else int(p * 10)))
    a = torch.randn(4, rows, 6, dtype=torch.float64, generator=g)
    b = torch.randn(4, 7, 6, dtype=torch.float64, generator=g)
    ra, rb = a.clone().requires_grad_(), b.clone().requires_grad_()
    want = torch.cdist(ra, rb, p=p)
    w = torch.randn(want.shape, dtype=torch.float64, generator=g)
    (want * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        got = []
        for pa, pb in LAYOUTS:
            xa = bridge.distribute(a.clone(), mesh, pa).requires_grad_()
            xb = bridge.distribute(b.clone(), mesh, pb).requires_grad_()
            y = torch.cdist(xa, xb, p=p)
            (y * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
            got.append((y.full_tensor(), xa.grad.full_tensor(), xb.grad.full_tensor()))
        return got

    for rank_got in dtensor.run_threads(4, fn):
        for y, ga, gb in rank_got:
            torch.testing.assert_close(y, want.detach(), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(ga, ra.grad, rtol=1e-10, atol=1e-10)
            torch.testing.assert_close(gb, rb.grad, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("p", [0.0, 1.0, 1.5, 2.0, math.inf])
def test_pdist_matches_torch(p):
    # F.pdist: _pdist_forward / _pdist_backward; the columns sharded (a Partial sum or max for
    # p = 0, 1, inf), the rows sharded (gathered: every pair needs both rows).
    x = torch.randn(7, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    ref = x.clone().requires_grad_()
    want = torch.nn.functional.pdist(ref, p=p)
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    (want * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        got = []
        for placements in ([Shard(1), Replicate()], [Shard(0), Shard(1)]):
            xs = bridge.distribute(x.clone(), mesh, placements).requires_grad_()
            y = torch.nn.functional.pdist(xs, p=p)
            (y * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
            got.append((y.full_tensor(), xs.grad.full_tensor()))
        return got

    for rank_got in dtensor.run_threads(4, fn):
        for y, g in rank_got:
            torch.testing.assert_close(y, want.detach(), rtol=1e-12, atol=1e-12)
            torch.testing.assert_close(g, ref.grad, rtol=1e-10, atol=1e-10)
