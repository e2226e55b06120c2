# dtensor's factories (dtensor.ones, zeros, empty, full, rand, randn; torch.distributed.tensor's
# names and signatures): global values as torch's factories give them, each rank allocating only its
# block (the block shapes those of distributing the whole tensor), leaves that require grad when
# asked; rand and randn draw each block's slice of the one-device draw (dtensor's Philox op), with
# torch's distributions (two-sample KS); errors name the factory.
import math

import pytest

torch = pytest.importorskip("torch")

import dtensor as dt  # noqa: E402
from dtensor import Partial, Replicate, Shard, bridge  # noqa: E402
from test_bridge_random_transforms import two_sample_ks  # noqa: E402

PLACEMENTS = [[Shard(0), Shard(1)], [Shard(1), Shard(0)], [Replicate(), Shard(0)], [Shard(0), Shard(0)]]


def on_mesh(fn, shape=(2, 2)):
    return dt.run_threads(math.prod(shape), lambda w: fn(dt.init_device_mesh("cpu", shape)))


@pytest.mark.parametrize("placements", PLACEMENTS)
def test_values_and_blocks_are_torchs(placements):
    def fn(mesh):
        made = {"ones": dt.ones(5, 3, device_mesh=mesh, placements=placements),
                "zeros": dt.zeros((5, 3), dtype=torch.float64, device_mesh=mesh, placements=placements),
                "full": dt.full((5, 3), -2.5, device_mesh=mesh, placements=placements),
                "empty": dt.empty(5, 3, dtype=torch.int64, device_mesh=mesh, placements=placements)}
        blocks = {k: (tuple(v._local.shape), tuple(v.placements), v.dtype) for k, v in made.items()}
        whole = bridge.distribute(torch.zeros(5, 3), mesh, placements)
        return ({k: v.full_tensor() for k, v in made.items() if k != "empty"}, blocks, tuple(whole._local.shape))

    want = {"ones": torch.ones(5, 3), "zeros": torch.zeros(5, 3, dtype=torch.float64), "full": torch.full((5, 3), -2.5)}
    for values, blocks, block in on_mesh(fn):
        for k, w in want.items():
            assert values[k].dtype == w.dtype and torch.equal(values[k], w), k
        for k, (shape, got_placements, dtype) in blocks.items():
            assert shape == block and got_placements == tuple(placements), k
        assert blocks["empty"][2] == torch.int64


def test_leaves_require_grad_when_asked():
    def fn(mesh):
        x = dt.ones(4, 2, requires_grad=True, device_mesh=mesh, placements=[Shard(0), Replicate()])
        (x * 3).sum().backward()
        r = dt.randn(4, 2, requires_grad=True, device_mesh=mesh, placements=[Shard(0), Replicate()])
        return x.is_leaf, x.grad.full_tensor(), r.is_leaf and r.requires_grad

    for leaf, grad, r_leaf in on_mesh(fn):
        assert leaf and r_leaf and torch.equal(grad, torch.full((4, 2), 3.0))


@pytest.mark.parametrize("name", ["rand", "randn"])
def test_draws_are_the_one_device_draw_with_torchs_distribution(name):
    factory = getattr(dt, name)

    def draw(placements, shape):
        def fn(mesh):
            torch.manual_seed(11)
            x = factory(201, 99, dtype=torch.float64, device_mesh=mesh, placements=placements)
            return x.full_tensor(), x._local.clone()
        return on_mesh(fn, shape)

    (want, _), = draw([Replicate()], (1,))
    for placements, shape in (([Shard(0), Shard(1)], (2, 2)), ([Replicate(), Replicate()], (2, 2))):
        ranks = draw(placements, shape)
        for full, _ in ranks:
            assert torch.equal(full, want)
        assert torch.equal(ranks[0][1], ranks[1][1]) == (placements[0] == Replicate())
    torch.manual_seed(5)
    ref = getattr(torch, name)(201, 99, dtype=torch.float64)
    d = two_sample_ks(want, ref)
    assert d < 1.95 * math.sqrt(2 / want.numel()), f"KS distance {d:.4f} from torch's {name}"


def test_errors_name_the_factory():
    def fn(mesh):
        cases = [(lambda: dt.ones(2, 2), r"ones: device_mesh is required"),
                 (lambda: dt.zeros(2, -1, device_mesh=mesh), r"zeros: size \(2, -1\); accepted: non-negative ints"),
                 (lambda: dt.full((2,), 1.0, device_mesh=mesh, placements=[Partial(), Replicate()]),
                  r"full: placements .*accepted: Shard and Replicate"),
                 (lambda: dt.rand(3, dtype=torch.int64, device_mesh=mesh), r"rand: dtype torch.int64; accepted: a floating"),
                 (lambda: dt.ones(3, layout=torch.sparse_coo, device_mesh=mesh), r"ones: layout .*accepted: torch.strided")]
        for call, pattern in cases:
            with pytest.raises(dt.DTensorError, match=pattern):
                call()
        return True

    assert all(on_mesh(fn))
