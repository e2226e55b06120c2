# The index-map ops (ops/view/index_map_defs.cc) against torch beyond OpInfo's samples, forward and
# gradient through the bridge (torch's autograd then calls the ATen _backward op, which dtensor
# runs), the input sharded on the dims the op leaves alone (kept sharded) and on a mapped dim
# (gathered first): reflection and replication padding, whose OpInfo 2-d and 3-d samples never pad
# the left or top edge, on both sides and with a crop; nearest and bilinear upsampling with ATen's
# special cases (the same size, exact doubling), scale factors and align_corners, which OpInfo's
# samples miss; and ATen's argument errors as DTensorErrors naming the op.
import numpy as np
import pytest

import dtensor
from dtensor import Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

MODES = {"reflection": "reflect", "replication": "replicate"}
CASES = [(mode, k, pad) for mode in MODES for k in (1, 2, 3)
         for pad in ([2, 1] * k, [1, 0, 0, 2, 2, 1][:2 * k], [-1, 2] * k)]


def batch_input(k, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn([5, 3, 6, 5, 4][:k + 2], generator=g, dtype=torch.float64)


@pytest.mark.parametrize("mode,k,pad", CASES)
def test_pad_matches_torch_forward_and_gradient(mode, k, pad):
    x = batch_input(k, 7 * k + len(pad))
    w = torch.randn(getattr(torch.ops.aten, f"{mode}_pad{k}d")(x, pad).shape, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(3))
    ref = x.clone().requires_grad_()
    (torch.nn.functional.pad(ref, pad, mode=MODES[mode]) * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        out = []
        # dims 0 and 1 are left alone (kept sharded, 5 rows uneven over 2); the last dim is padded.
        for placements in ([Shard(0), Shard(1)], [Shard(k + 1), Shard(0)]):
            xs = bridge.distribute(x.clone(), mesh, placements).requires_grad_()
            y = torch.nn.functional.pad(xs, pad, mode=MODES[mode])
            (y * bridge.distribute(w, mesh, [dtensor.Replicate()] * 2)).sum().backward()
            out.append((list(y.placements), y.full_tensor(), xs.grad.full_tensor()))
        return out

    want = torch.nn.functional.pad(x, pad, mode=MODES[mode])
    for rank_out in dtensor.run_threads(4, fn):
        (kept, y0, g0), (_, y1, g1) = rank_out
        assert kept[:2] == [Shard(0), Shard(1)], kept  # no gather along the dims the pad leaves alone
        for y, g in ((y0, g0), (y1, g1)):
            torch.testing.assert_close(y, want, rtol=0, atol=0)
            torch.testing.assert_close(g, ref.grad, rtol=1e-12, atol=1e-12)


UPSAMPLE = [("nearest", dict(size=(4, 10))), ("nearest", dict(scale_factor=2)), ("nearest", dict(size=(7, 3))),
            ("nearest", dict(scale_factor=(1.7, 0.6))),
            ("bilinear", dict(size=(4, 5), align_corners=False)), ("bilinear", dict(size=(9, 7), align_corners=False)),
            ("bilinear", dict(size=(3, 2), align_corners=True)), ("bilinear", dict(scale_factor=1.5, align_corners=False)),
            ("bilinear", dict(size=(6, 1), align_corners=True))]


@pytest.mark.parametrize("mode,kw", UPSAMPLE)
def test_upsample_matches_torch_forward_and_gradient(mode, kw):
    x = torch.randn(5, 3, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(11))
    want = torch.nn.functional.interpolate(x, mode=mode, **kw)
    w = torch.randn(want.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    ref = x.clone().requires_grad_()
    (torch.nn.functional.interpolate(ref, mode=mode, **kw) * w).sum().backward()

    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        out = []
        for placements in ([Shard(0), Shard(1)], [Shard(3), Shard(0)]):  # N, C kept; W gathered
            xs = bridge.distribute(x.clone(), mesh, placements).requires_grad_()
            y = torch.nn.functional.interpolate(xs, mode=mode, **kw)
            (y * bridge.distribute(w, mesh, [dtensor.Replicate()] * 2)).sum().backward()
            out.append((list(y.placements), y.full_tensor(), xs.grad.full_tensor()))
        return out

    for rank_out in dtensor.run_threads(4, fn):
        (kept, y0, g0), (_, y1, g1) = rank_out
        assert kept == [Shard(0), Shard(1)], kept
        for y, g in ((y0, g0), (y1, g1)):
            torch.testing.assert_close(y, want, rtol=1e-15, atol=1e-15)
            torch.testing.assert_close(g, ref.grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("op,shape,padding,message", [
    ("reflection_pad1d", [2, 3, 4], [4, 0], r"padding \(4, 0\) of dim 2 of size 4: reflection accepts padding less"),
    ("reflection_pad2d", [2, 3, 4], [1, 1], r"padding has 2 values; accepted: 4"),
    ("replication_pad1d", [4], [1, 1], r"self \[4\]: accepted: a 2-d or \(batch mode\) 3-d tensor"),
    ("replication_pad1d", [2, 0, 3], [1, 1], r"dims are non-zero except the batch dim"),
    ("replication_pad2d", [2, 3, 3], [-2, -1, 0, 0], r"gives 0 positions; accepted: at least 1"),
    ("replication_pad1d", [2, 3], [2**62, 2**62], r"padding \(4611686018427387904, 4611686018427387904\) of dim 1 overflows int64"),
    ("replication_pad1d", [2, 3, 5], [2**61, 2**61], r"has more elements than int64 can count"),
    ("upsample_nearest2d", [1, 1, 4, 5], [2**40, 2**40], r"has more elements than int64 can count"),
    ("upsample_nearest2d", [1, 0, 4, 5], [8, 10], r"accepted: a 4-d \[N, C, H, W\] input with C, H, W > 0"),
])
def test_pad_errors_name_the_op_and_what_is_accepted(op, shape, padding, message):
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (1,))
        x = dtensor.distribute_tensor(np.zeros(shape), mesh, [dtensor.Replicate()])
        with pytest.raises(dtensor.DTensorError, match=message) as e:
            dtensor.ops.call(op, x, padding)
        assert op in str(e.value)

    dtensor.run_threads(1, fn)
