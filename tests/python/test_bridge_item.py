# Tensor.item() on a bridge DTensor (aten._local_scalar_dense, the registered op of ops/metadata/): the
# global value on every rank, whatever the placements (PyTorch DTensor returns the rank's own block's
# value, a Partial's piece); torch's RuntimeError for more than one element, naming the shape and
# placements.
import pytest

import dtensor
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402


def test_item_is_the_global_value_on_every_rank():
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        rank = mesh.get_rank()
        rep = bridge.distribute(torch.tensor(3.5), mesh, [Replicate(), Replicate()])
        # One element sharded over 2: the rank holding it and the one with an empty block agree.
        shard = bridge.distribute(torch.tensor([7.25]), mesh, [Shard(0), Replicate()])
        # Partial pieces that differ per rank: sum 1 + 2 + 3 + 4, max 4.
        piece = torch.tensor(float(rank + 1))
        psum = bridge.from_local(piece, mesh, [Partial(), Partial()], shape=())
        pmax = bridge.from_local(piece, mesh, [Partial("max"), Replicate()], shape=())
        # A loss as training loops read it: mean over a sharded batch, a Partial before item().
        x = torch.arange(12, dtype=torch.float64).reshape(6, 2)
        loss = (bridge.distribute(x, mesh, [Shard(0), Shard(1)]) ** 2).mean()
        return [rep.item(), shard.item(), psum.item(), pmax.item(), loss.item()]

    want_pmax = {0: 3.0, 1: 4.0}  # max over mesh dim 0 of ranks (0, 2) -> 3, (1, 3) -> 4
    x = torch.arange(12, dtype=torch.float64).reshape(6, 2)
    for rank, got in enumerate(dtensor.run_threads(4, fn)):
        assert got[:3] == [3.5, 7.25, 10.0]
        assert got[3] == want_pmax[rank % 2]
        assert got[4] == pytest.approx((x ** 2).mean().item(), rel=1e-15)


def test_item_of_more_than_one_element_raises_as_torch():
    # Tensor.item() checks the element count before dispatch (torch's own message); the ATen op
    # called directly gets the bridge's, naming the shape and placements.
    def fn(r):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.ones(3, 2), mesh, [Shard(0)])
        with pytest.raises(RuntimeError, match=r"a Tensor with 6 elements cannot be converted to Scalar"):
            x.item()
        with pytest.raises(RuntimeError, match=r"_local_scalar_dense\(float32\[3, 2\] \[S\(0\)\]\) on mesh \[2\]: a tensor \[3, 2\] "
                                               r"with 6 elements cannot be converted to a Scalar; accepted: exactly one element"):
            torch.ops.aten._local_scalar_dense(x)

    dtensor.run_threads(2, fn)
