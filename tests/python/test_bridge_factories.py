# dtensor's factories (python/dtensor/factories.py: ones, zeros, empty, full, rand, randn with
# torch.distributed.tensor's names and signatures; arange, linspace, logspace, eye, scalar_tensor,
# empty_strided, empty_permuted, randint, tril_indices, triu_indices: torch's with a mesh): global
# values as torch's factories give them, each rank allocating only its block (the block shapes those
# of distributing the whole tensor), leaves that require grad when asked; rand, randn and randint
# draw each block's slice of the one-device draw (dtensor's Philox op), with torch's distributions
# (two-sample KS; randint's counts by chi-square); errors name the factory.
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
                  r"full: full\(size=\[2\].*asked as \[P\(sum\), R\].*cannot be Partial.*accepted: Shard and Replicate"),
                 (lambda: dt.rand(3, dtype=torch.int64, device_mesh=mesh), r"rand: dtype torch.int64; accepted: a floating"),
                 (lambda: dt.ones(3, layout=torch.sparse_coo, device_mesh=mesh), r"ones: layout .*accepted: torch.strided")]
        for call, pattern in cases:
            with pytest.raises(dt.DTensorError, match=pattern):
                call()
        return True

    assert all(on_mesh(fn))


# (factory, args, kwargs): torch's factory of that name with the same arguments is the reference.
SPACED = [("arange", (10,), {}), ("arange", (-1, 2, 0.3), {"dtype": torch.float64}), ("arange", (7, -4, -3), {}),
          ("linspace", (-2.0, 3, 7), {"dtype": torch.float64}), ("linspace", (-2.0, 3, 50), {}),
          ("linspace", (0, 100, 9), {"dtype": torch.int64}), ("linspace", (4, 4, 1), {}),
          ("logspace", (0, -3, 9, 2.0), {"dtype": torch.float64}), ("logspace", (1, 3, 10), {}),
          ("eye", (5, 7), {}), ("eye", (6,), {"dtype": torch.int64}),
          ("tril_indices", (5, 4, 1), {}), ("triu_indices", (5, 4, -1), {}), ("triu_indices", (3, 6), {})]


@pytest.mark.parametrize("placements", PLACEMENTS)
def test_torchs_other_factories_with_a_mesh(placements):
    def fn(mesh):
        out = []
        for name, args, kwargs in SPACED:
            got = getattr(dt, name)(*args, **kwargs, device_mesh=mesh,
                                    placements=[p if not p.is_shard() or p.dim < (1 if name in ("arange", "linspace", "logspace") else 2)
                                                else Shard(0) for p in placements])
            out.append((got.full_tensor(), tuple(got._local.shape), tuple(bridge.distribute(
                torch.zeros(got.shape), mesh, got.placements)._local.shape)))
        return out

    for ranks in on_mesh(fn):
        for (name, args, kwargs), (got, block, want_block) in zip(SPACED, ranks):
            want = getattr(torch, name)(*args, **kwargs)
            assert got.dtype == want.dtype and block == want_block, (name, args)
            # Equal up to rounding: torch's vectorized kernel adds the step within chunks of a vector.
            atol = 1e-6 if want.dtype == torch.float32 else 1e-12
            torch.testing.assert_close(got, want, rtol=1e-6, atol=atol, msg=lambda m: f"{name}{args}: {m}")


def test_scalar_tensor_and_uninitialized_layouts():
    def fn(mesh):
        s = dt.scalar_tensor(-5, dtype=torch.float64, device_mesh=mesh)
        e = dt.empty_strided((5, 3), (1, 5), device_mesh=mesh, placements=[Shard(0), Shard(1)])
        p = dt.empty_permuted((4, 6), (1, 0), dtype=torch.int64, device_mesh=mesh, placements=[Shard(1), Replicate()])
        return s.full_tensor(), (e.shape, e.dtype, tuple(e._local.shape)), (p.shape, p.dtype, tuple(p._local.shape))

    for s, e, p in on_mesh(fn):
        assert torch.equal(s, torch.scalar_tensor(-5, dtype=torch.float64))
        assert e[0] == (5, 3) and e[1] == torch.float32 and e[2] in ((3, 2), (3, 1), (2, 2), (2, 1))
        assert p[0] == (4, 6) and p[1] == torch.int64 and p[2] == (4, 3)


def test_randint_is_the_one_device_draw_and_uniform():
    def draw(placements, shape):
        def fn(mesh):
            torch.manual_seed(3)
            return dt.randint(-3, 5, (300, 41), device_mesh=mesh, placements=placements).full_tensor()
        return on_mesh(fn, shape)

    want, = draw([Replicate()], (1,))
    for full in draw([Shard(1), Shard(0)], (2, 2)):
        assert torch.equal(full, want)
    assert want.dtype == torch.int64 and int(want.min()) == -3 and int(want.max()) == 4
    counts = torch.bincount(want.flatten() + 3, minlength=8).double()
    expected = want.numel() / 8
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 24.3, f"chi-square {chi2:.1f} over 7 degrees of freedom (p = 0.001 bound 24.3)"


def test_other_factories_errors_name_the_factory():
    def fn(mesh):
        cases = [(lambda: dt.arange(0, 5, 0, device_mesh=mesh), r"arange: .*step"),
                 (lambda: dt.arange(torch.ones(2), device_mesh=mesh), r"arange: end is a tensor of shape \(2,\)"),
                 (lambda: dt.linspace(0, 1, -1, device_mesh=mesh), r"linspace: .*"),
                 (lambda: dt.linspace(0, 1, 2.5, device_mesh=mesh), r"linspace: steps = 2.5; accepted"),
                 (lambda: dt.eye(-2, device_mesh=mesh), r"eye: .*"),
                 (lambda: dt.scalar_tensor(1.0, device_mesh=mesh, placements=[Shard(0), Replicate()]), r"Shard\(0\)|dim"),
                 (lambda: dt.empty_strided((2, 2), (1,), device_mesh=mesh), r"empty_strided: .*stride \[1\] for size \[2, 2\]; accepted: one non-negative int per dim"),
                 (lambda: dt.empty_permuted((2, 2), (0, 0), device_mesh=mesh), r"empty_permuted: physical_layout"),
                 (lambda: dt.randint(5, 5, (3,), device_mesh=mesh), r"randint: low 5 >= high 5"),
                 (lambda: dt.randint(5, (3,), generator=torch.Generator(), device_mesh=mesh), r"randint: a torch.Generator"),
                 (lambda: dt.arange(4, device="meta", device_mesh=mesh), r"arange: device meta")]
        for call, pattern in cases:
            with pytest.raises(dt.DTensorError, match=pattern):
                call()
        return True

    assert all(on_mesh(fn))


def test_randperm_is_one_permutation_on_every_layout():
    def draw(placements, shape):
        def fn(mesh):
            torch.manual_seed(4)
            p = dt.randperm(37, device_mesh=mesh, placements=placements)
            return p.full_tensor(), tuple(p._local.shape)
        return on_mesh(fn, shape)

    (want, _), = draw([Replicate()], (1,))
    assert want.dtype == torch.int64 and torch.equal(torch.sort(want).values, torch.arange(37))
    for placements in ([Shard(0), Shard(0)], [Replicate(), Shard(0)]):
        for full, _ in draw(placements, (2, 2)):
            assert torch.equal(full, want), placements
    # Uniform over positions: where 0 lands, over many draws (chi-square, 36 degrees of freedom).
    def many(mesh):
        torch.manual_seed(9)
        return torch.stack([dt.randperm(37, device_mesh=mesh).full_tensor() for _ in range(370)])
    perms, = on_mesh(many, (1,))
    counts = torch.bincount((perms == 0).nonzero()[:, 1], minlength=37).double()
    chi2 = float(((counts - 10) ** 2 / 10).sum())
    assert chi2 < 67.99, f"chi-square {chi2:.1f} over 36 degrees of freedom (p = 0.001 bound 67.99)"
