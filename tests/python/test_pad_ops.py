# Reflection and replication padding (ops/view/pad_defs.cc) against torch beyond OpInfo's samples,
# whose 2-d and 3-d cases never pad the left or top edge: every k-d op with padding on both sides
# and with a crop, its input sharded on the dims it leaves alone (kept sharded) and on a padded dim
# (gathered first), forward and gradient through the bridge (torch's autograd then calls the ATen
# _backward op, which dtensor runs), and ATen's argument errors as DTensorErrors naming the op.
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


@pytest.mark.parametrize("op,shape,padding,message", [
    ("reflection_pad1d", [2, 3, 4], [4, 0], r"padding \(4, 0\) of dim 2 of size 4: reflection accepts padding less"),
    ("reflection_pad2d", [2, 3, 4], [1, 1], r"padding has 2 values; accepted: 4"),
    ("replication_pad1d", [4], [1, 1], r"self \[4\]: accepted: a 2-d or \(batch mode\) 3-d tensor"),
    ("replication_pad1d", [2, 0, 3], [1, 1], r"dims are non-zero except the batch dim"),
    ("replication_pad2d", [2, 3, 3], [-2, -1, 0, 0], r"gives 0 positions; accepted: at least 1"),
    ("replication_pad1d", [2, 3], [2**62, 2**62], r"padding \(4611686018427387904, 4611686018427387904\) of dim 1 overflows int64"),
])
def test_pad_errors_name_the_op_and_what_is_accepted(op, shape, padding, message):
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (1,))
        x = dtensor.distribute_tensor(np.zeros(shape), mesh, [dtensor.Replicate()])
        with pytest.raises(dtensor.DTensorError, match=message) as e:
            dtensor.ops.call(op, x, padding)
        assert op in str(e.value)

    dtensor.run_threads(1, fn)
