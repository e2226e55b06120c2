# The copies of ops/view/copy_defs.cc beyond the OpInfo oracle (which compares clone, flip, repeat,
# constant_pad_nd and fill with torch, forward and gradients): alias, which no OpInfo entry covers,
# against torch.ops.aten.alias, its block being the input's own memory; and a flip or pad along a
# sharded dim, which the rules must gather first, on an uneven shard.
import numpy as np
import pytest

import dtensor
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")

X = np.arange(35, dtype=np.float32).reshape(7, 5)  # 7 rows: uneven over 2 ranks


def test_alias_is_the_block_itself_and_equals_torch():
    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        local = np.ascontiguousarray(X[[0, 1, 2, 3]] if w.rank == 0 else X[[4, 5, 6]])
        d = dtensor.DTensor.from_local(local, mesh, [Shard(0)], shape=[7, 5])
        a = dtensor.ops.call("alias", d)
        block = a.to_local()
        local[0, 0] = -1.0  # the same memory: the alias sees the write
        return list(a.placements), float(np.asarray(block)[0, 0]), a.full_tensor()

    want = torch.ops.aten.alias(torch.from_numpy(X)).numpy()
    for placements, seen, full in dtensor.run_threads(2, fn):
        assert placements == [Shard(0)] and seen == -1.0
        np.testing.assert_array_equal(np.delete(full, [0, 4], axis=0), np.delete(want, [0, 4], axis=0))


@pytest.mark.parametrize("name,args,ref", [
    ("flip", ([0],), lambda t: torch.flip(t, [0])),
    ("constant_pad_nd", ([1, 2, 2, 0], 3.0), lambda t: torch.constant_pad_nd(t, [1, 2, 2, 0], 3.0)),
    ("repeat", ([2, 1],), lambda t: t.repeat(2, 1)),
])
def test_rearranging_a_sharded_dim_gathers_it_first(name, args, ref):
    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        y = dtensor.ops.call(name, dtensor.distribute_tensor(X, mesh, [Shard(0)]), *args)
        return list(y.placements), y.full_tensor()

    want = ref(torch.from_numpy(X)).numpy()
    for placements, full in dtensor.run_threads(2, fn):
        assert placements[0] != Shard(0)  # dim 0 is flipped, padded (2, 0), repeated: never kept sharded
        np.testing.assert_array_equal(full, want)


def test_bridge_full_like_keeps_shards_and_takes_the_dtype():
    # torch.full_like on a bridge tensor runs dtensor's full_like: the shards stay (no gather), a
    # Partial input gives a Replicate output (its values are not the input's), the dtype argument
    # and an integer's truncation are torch's, and a device change is refused by name.
    from dtensor import Partial, bridge

    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.from_numpy(X), mesh, [Shard(0)])
        a = torch.full_like(x, 2.5, dtype=torch.float64)
        b = torch.full_like(x.to(torch.int64), 2.5)
        c = torch.full_like(bridge.from_local(torch.ones(7, 5), mesh, [Partial()], shape=(7, 5)), -1.0)
        for like in (lambda: torch.full_like(x, 1.0, device="meta"), lambda: torch.zeros_like(x, device="meta")):
            with pytest.raises(Exception, match="_like.*device meta"):
                like()
        return tuple(a.placements), a.full_tensor(), b.full_tensor(), (tuple(c.placements), c.full_tensor())

    for pa, fa, fb, pc in dtensor.run_threads(2, fn):
        assert pa == (Shard(0),)
        assert torch.equal(fa, torch.full((7, 5), 2.5, dtype=torch.float64))
        assert torch.equal(fb, torch.full((7, 5), 2, dtype=torch.int64))
        assert pc[0] == (Replicate(),) and torch.equal(pc[1], torch.full((7, 5), -1.0))


def test_bridge_copy_matches_torch_with_broadcast_and_cast():
    # aten.copy (the out-of-place copy_ of functionalized graphs; no OpInfo entry) against torch on
    # the same data: src broadcast into self's shape and cast to its dtype, self sharded and src
    # sharded along the same dim or broadcast. (torch defines no derivative for aten::copy, so the
    # bridge has none either; dtensor's own backward is checked by tests/autograd:gradcheck_test.)
    from dtensor import bridge

    torch.manual_seed(3)
    self_t = torch.randn(7, 4, 5, dtype=torch.float64)
    srcs = [torch.randn(7, 4, 5), torch.randn(4, 1, dtype=torch.float64), torch.randint(-9, 9, (5,))]
    want = [torch.ops.aten.copy(self_t, s) for s in srcs]

    def fn(w):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        s = bridge.distribute(self_t, mesh, [Shard(0)])
        got = [torch.ops.aten.copy(s, bridge.distribute(srcs[0], mesh, [Shard(0)])),
               torch.ops.aten.copy(s, bridge.distribute(srcs[1], mesh, [Replicate()])),
               torch.ops.aten.copy(s, bridge.distribute(srcs[2], mesh, [Shard(0)]))]
        return [tuple(g.placements) for g in got], [g.full_tensor() for g in got]

    for placements, full in dtensor.run_threads(2, fn):
        assert placements[0] == (Shard(0),) and placements[1] == (Shard(0),)
        for g, w_ in zip(full, want):
            assert g.dtype == torch.float64 and torch.equal(g, w_)
