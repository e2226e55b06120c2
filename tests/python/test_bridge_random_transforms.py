# ATen's random ops through the bridge as transforms of dtensor's Philox draws (torch_bridge.py,
# "random numbers"): uniform_, normal_, exponential_, cauchy_, log_normal_, geometric_, random_,
# randint_like, bernoulli with a tensor p, normal with tensor mean / std, rrelu, multinomial. Each is checked
# three ways: its distribution against torch's own op on the same shape (two-sample
# Kolmogorov-Smirnov at the 0.1% level; torch draws from mt19937, an independent generator); a
# sharded run equals the one-device run element for element (DTensor semantics), replicas equal;
# and the errors: ATen's parameter checks, generators, and random ops with no handler refused even
# under the replicate fallback (which would draw different values on each rank).
import math

import pytest

torch = pytest.importorskip("torch")

import dtensor  # noqa: E402
from dtensor import Replicate, Shard, bridge  # noqa: E402

SHAPE = (201, 99)  # uneven over 2 ranks on both dims

OPS = {
    "uniform_": lambda x: x.uniform_(-2.0, 3.0),
    "normal_": lambda x: x.normal_(1.5, 0.5),
    "exponential_": lambda x: x.exponential_(2.5),
    "cauchy_": lambda x: x.cauchy_(1.0, 0.5),
    "log_normal_": lambda x: x.log_normal_(0.5, 0.75),
    "geometric_": lambda x: x.geometric_(0.3),
    "random_": lambda x: x.random_(-3, 7),
    "randint_like": lambda x: torch.randint_like(x, 2, 9),
    "bernoulli(p)": lambda x: torch.bernoulli(torch.sigmoid(x * 0 + 0.4)),
    "normal(mean)": lambda x: torch.normal(x * 0 + 2.0, 3.0),
    "rrelu": lambda x: torch.nn.functional.rrelu(x * 0 - 1.0, 0.2, 0.6, training=True),
    # rows of probabilities 0, 1/15, ..., 5/15 (one category never drawn)
    "multinomial": lambda x: torch.multinomial(x[:, :6] * 0 + torch.arange(6.0, dtype=torch.float64), 4,
                                               replacement=True),
    "multinomial(no replacement)": lambda x: torch.multinomial(x[:, :6] * 0 + torch.arange(6.0, dtype=torch.float64), 3),
}
LAYOUT_CHANGING = {"multinomial", "multinomial(no replacement)"}  # rows keep their Shards, categories whole


def two_sample_ks(a, b):
    """sup |F_a - F_b| over the pooled values (ties counted at once: valid for discrete draws)."""
    a, b = torch.sort(a.flatten().double())[0], torch.sort(b.flatten().double())[0]
    v = torch.unique(torch.cat([a, b]))
    fa = torch.searchsorted(a, v, right=True).double() / a.numel()
    fb = torch.searchsorted(b, v, right=True).double() / b.numel()
    return float((fa - fb).abs().max())


def on_mesh(shape, placements, fn, seed=1234):
    def rank(w):
        mesh = dtensor.init_device_mesh("cpu", shape)
        torch.manual_seed(seed)
        x = bridge.distribute(torch.zeros(SHAPE, dtype=torch.float64), mesh, placements)
        y = fn(x)
        return tuple(y.placements), y.to_local().clone(), y.full_tensor()

    return dtensor.run_threads(math.prod(shape), rank)


@pytest.mark.parametrize("name", sorted(OPS))
def test_distribution_matches_torchs_own_op(name):
    (_, _, got), *_ = on_mesh((2, 2), [Shard(0), Shard(1)], OPS[name])
    torch.manual_seed(99)
    want = OPS[name](torch.zeros(SHAPE, dtype=torch.float64))
    assert got.dtype == want.dtype
    n = got.numel()
    d = two_sample_ks(got, want)
    assert d < 1.95 * math.sqrt(2 / n), f"{name}: KS distance {d:.4f} from torch's draws"
    assert torch.unique(got).numel() > 1


@pytest.mark.parametrize("name", sorted(OPS))
def test_a_sharded_draw_is_the_one_device_draw(name):
    (_, _, want), = on_mesh((1,), [Replicate()], OPS[name])
    for shape, placements in (((2,), [Shard(0)]), ((2, 2), [Shard(1), Shard(0)]), ((2,), [Replicate()])):
        ranks = on_mesh(shape, placements, OPS[name])
        for got_placements, _, full in ranks:
            assert torch.equal(full, want), (name, shape, placements)
            assert got_placements == tuple(placements) or name in LAYOUT_CHANGING
        if not any(p.is_shard() for p in ranks[0][0]):  # replicas: the same values on every rank
            assert torch.equal(ranks[0][1], ranks[1][1])
        else:  # the shards differ: each drew its own slice
            assert not torch.equal(ranks[0][1][:10], ranks[1][1][:10])


def test_errors_name_the_op():
    def rank(w):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.zeros(4, 3, dtype=torch.float64), mesh, [Shard(0)])
        i = bridge.distribute(torch.zeros(4, 3, dtype=torch.int64), mesh, [Shard(0)])
        cases = [
            (lambda: x.uniform_(2.0, 1.0), r"uniform_.*from, to = \(2.0, 1.0\); accepted: from <= to"),
            (lambda: x.exponential_(-1.0), r"exponential_.*lambd = -1.0; accepted: lambd > 0"),
            (lambda: x.geometric_(1.5), r"geometric_.*p = 1.5; accepted: 0 < p < 1"),
            (lambda: x.normal_(0.0, -1.0), r"normal_.*std = -1.0; accepted: std >= 0"),
            (lambda: i.exponential_(), r"exponential_.*torch.int64.*accepted: a floating dtype"),
            (lambda: i.random_(), r"random_.*int64.*without `to`"),
            (lambda: x.uniform_(generator=torch.Generator()), r"uniform_.*explicit generator"),
            (lambda: torch.normal(x, x - 1), r"normal.Tensor_Tensor.*std = a negative element"),
            (lambda: torch.bernoulli(x + 2), r"bernoulli.*p = an element outside \[0, 1\]"),
            (lambda: torch.poisson(x + 1), r"poisson.*random op with no DTensor-semantic draw"),
            (lambda: torch.multinomial(x - 1, 2), r"multinomial.*a valid distribution per row"),
            (lambda: torch.multinomial(x + 1, 4), r"multinomial.*num_samples = 4; accepted: 1 to 3 without replacement"),
        ]
        seen = []
        for call, pattern in cases:
            with pytest.raises(dtensor.DTensorError, match=pattern):
                call()
            seen.append(pattern)
        # The replicate fallback would run torch's generator on each rank: still refused.
        with bridge.allow_replicate_fallback():
            with pytest.raises(dtensor.DTensorError, match=r"poisson.*no DTensor-semantic draw"):
                torch.poisson(x + 1)
        return len(seen)

    assert dtensor.run_threads(2, rank) == [12, 12]
