# torch.tensor_split of a bridge tensor against torch: sections or indices as ints, lists and host
# tensors, along a sharded dim and another, on Shard / Replicate / Partial layouts of a [2, 2] mesh.
# ATen's tensor_split.tensor_indices_or_sections (CompositeImplicitAutograd) reads a 1-d indices
# tensor's data pointer in C++ before any op reaches dispatch, so a wrapper subclass (the bridge's,
# as PyTorch DTensor's) cannot be the indices: torch's error, not the bridge's (op_db's entry passes
# them as plain tensors, tests/python/opdb_oracle.py HOST_TENSORS). A 0-d sections tensor is read by
# .item(), which the bridge answers (the registered _local_scalar_dense), so a bridge tensor works there.
import pytest

torch = pytest.importorskip("torch")

import dtensor as dt  # noqa: E402
from dtensor import Partial, Replicate, Shard, bridge  # noqa: E402

X = torch.arange(7 * 5, dtype=torch.float64).reshape(7, 5) / 8
LAYOUTS = [(Shard(0), Shard(1)), (Shard(0), Shard(0)), (Replicate(), Shard(1)), (Partial(), Shard(0))]
SPLITS = [torch.tensor([1, 5]), torch.tensor([2, 2, 6]), torch.tensor(3), 3, [0, 4], [6, 2]]


def _placed(mesh, placements):
    if any(p.is_partial() for p in placements):  # pieces x / 2 over the Partial mesh dim of size 2
        d = bridge.distribute(X / 2, mesh, [Replicate() if p.is_partial() else p for p in placements])
        return bridge.DTensor(d._local, d._spec.with_(list(placements), list(X.shape), "float64"), mesh)
    return bridge.distribute(X, mesh, list(placements))


def test_tensor_split_matches_torch():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        problems = []
        for placements in LAYOUTS:
            d = _placed(mesh, placements)
            for split in SPLITS:
                for dim in (0, 1):
                    got = [p.full_tensor() for p in torch.tensor_split(d, split, dim=dim)]
                    want = torch.tensor_split(X, split, dim=dim)
                    if len(got) != len(want) or not all(torch.equal(g, w) for g, w in zip(got, want)):
                        problems.append(f"{placements} {split!r} dim={dim}: {[g.shape for g in got]} vs "
                                        f"{[w.shape for w in want]}")
        return problems

    for problems in dt.run_threads(4, fn):
        assert not problems, "\n".join(problems)


def test_tensor_split_sections_as_a_bridge_tensor():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        d = _placed(mesh, (Shard(0), Shard(1)))
        sections = bridge.from_local(torch.tensor(1 + mesh.get_rank() % 2), mesh, [Replicate(), Partial()], shape=())
        got = [p.full_tensor() for p in torch.tensor_split(d, sections, dim=0)]  # 1 + 2 = 3 sections
        indices = bridge.distribute(torch.tensor([1, 5]), mesh, [Replicate(), Replicate()])
        with pytest.raises(RuntimeError, match="its data is not allocated yet"):
            torch.tensor_split(d, indices, dim=0)
        return got

    want = torch.tensor_split(X, 3, dim=0)
    for got in dt.run_threads(4, fn):
        assert len(got) == 3 and all(torch.equal(g, w) for g, w in zip(got, want))
