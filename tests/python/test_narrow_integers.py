# torch's byte, char and short (uint8, int8, int16) on bridge DTensors, against torch on one device:
# type promotion over every pair of dtensor's dtypes, wrapping arithmetic, the Partial sum that wraps
# when a redistribution reduces it, integer reductions that widen to int64, the 8- and 16-bit radix
# keys of a selection on a sharded dim, and the conversions x.byte() / x.char() / x.short(). The
# OpInfo oracle (test_opinfo.py) runs every entry's first samples in these dtypes too.
import itertools

import pytest

import dtensor
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

NARROW = (torch.uint8, torch.int8, torch.int16)
ALL = (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, *NARROW,
       torch.bool, torch.complex64, torch.complex128)


def values(dtype, n, seed):
    """n values spread over dtype's whole range (both ends included), so that sums and products wrap."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(n, generator=g, dtype=torch.float64) * 50).to(dtype)
    info = torch.iinfo(dtype)
    v = torch.randint(max(info.min, -(2 ** 20)), min(info.max, 2 ** 20) + 1, (n,), generator=g, dtype=torch.int64)
    v[0], v[1] = max(info.min, -(2 ** 20)), min(info.max, 2 ** 20)
    return v.to(dtype)


def on_2x2(fn):
    return dtensor.run_threads(4, lambda world: fn(dtensor.init_device_mesh("cpu", (2, 2))))


def test_promotion_of_every_pair_matches_torch():
    """a + b for every ordered pair of dtypes, a sharded and b replicated: the result's dtype is
    torch.promote_types(a, b) and its values torch's (uint8 with int8 is int16, not either)."""
    pairs = list(itertools.product(ALL, ALL))
    xs = {d: values(d, 6, seed=i) for i, d in enumerate(ALL)}

    def fn(mesh):
        out = []
        for a, b in pairs:
            x = bridge.distribute(xs[a], mesh, [Shard(0), Replicate()])
            y = bridge.distribute(xs[b], mesh, [Replicate(), Replicate()])
            out.append(torch.add(x, y).full_tensor())
        return out

    for got in on_2x2(fn):
        for (a, b), g in zip(pairs, got):
            want = torch.add(xs[a], xs[b])
            assert g.dtype == torch.promote_types(a, b) == want.dtype, (a, b, g.dtype)
            torch.testing.assert_close(g, want, rtol=1e-2 if want.dtype in (torch.float16, torch.bfloat16) else 1e-6,
                                       atol=0, msg=f"{a} + {b}")


@pytest.mark.parametrize("dtype", NARROW)
def test_wrapping_arithmetic_matches_torch(dtype):
    """Sums, products, negation, shifts and bitwise ops past the dtype's range wrap as torch's do,
    on a dim-0-sharded tensor (uneven blocks: 9 rows over 2 ranks)."""
    X = values(dtype, 9, seed=1).reshape(9, 1).repeat(1, 3)
    Y = values(dtype, 9, seed=2).reshape(9, 1).repeat(1, 3)
    ops = {
        "add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
        "neg": lambda x, y: -x, "abs": lambda x, y: x.abs(), "shl": lambda x, y: x << 3,
        "shr": lambda x, y: x >> 2, "not": lambda x, y: ~x, "xor": lambda x, y: x ^ y,
        "max": lambda x, y: torch.maximum(x, y), "lt": lambda x, y: x < y,
        "floor_divide": lambda x, y: torch.floor_divide(x, y.masked_fill(y == 0, 3)),
        "remainder": lambda x, y: torch.remainder(x, y.masked_fill(y == 0, 3)),
        "add_scalar": lambda x, y: x + 100, "mul_scalar": lambda x, y: x * 3,
        "true_div": lambda x, y: x / 7,  # an integer divided: the default floating dtype
    }

    def fn(mesh):
        x = bridge.distribute(X, mesh, [Shard(0), Replicate()])
        y = bridge.distribute(Y, mesh, [Shard(0), Shard(1)])
        return {k: f(x, y).full_tensor() for k, f in ops.items()}

    for got in on_2x2(fn):
        for k, f in ops.items():
            want = f(X, Y)
            assert got[k].dtype == want.dtype, (k, got[k].dtype, want.dtype)
            torch.testing.assert_close(got[k], want, rtol=1e-6, atol=0, msg=k)


@pytest.mark.parametrize("dtype", NARROW)
def test_partial_sum_wraps_when_reduced(dtype):
    """A Partial("sum") tensor of blocks whose sum passes the dtype's range: Replicate holds the
    wrapped sum torch's (a + b + c + d) gives, and its sum (int64) is that of the wrapped values, not
    of the pieces (no rule may keep the pieces Partial in a wider dtype); the widening reductions
    (sum, cumsum, prod) of a sharded tensor are int64."""
    blocks = [values(dtype, 5, seed=10 + r) for r in range(4)]
    want = blocks[0] + blocks[1] + blocks[2] + blocks[3]

    def fn(mesh):
        r = mesh.get_rank()
        p = bridge.from_local(blocks[r], mesh, [Partial(), Partial()])
        return p.redistribute(mesh, [Replicate(), Replicate()]).to_local(), p.sum().full_tensor()

    for rep, total in on_2x2(fn):
        assert rep.dtype == dtype
        assert torch.equal(rep, want)
        assert total.dtype == torch.int64 and torch.equal(total, want.sum())

    X = values(dtype, 11, seed=3)

    def fn2(mesh):
        x = bridge.distribute(X, mesh, [Shard(0), Replicate()])
        return x.sum().full_tensor(), x.cumsum(0).full_tensor(), x.prod().full_tensor()

    for s, c, p in on_2x2(fn2):
        assert torch.equal(s, X.sum()) and s.dtype == torch.int64
        assert torch.equal(c, X.cumsum(0)) and c.dtype == torch.int64
        assert torch.equal(p, X.prod()) and p.dtype == torch.int64


@pytest.mark.parametrize("dtype", NARROW)
def test_selection_on_a_sharded_dim_matches_torch(dtype):
    """median, kthvalue, topk, sort and max along a sharded dim: the distributed radix select on
    8- and 16-bit keys (negative values flip the key's sign bit) gives torch's values."""
    X = values(dtype, 4 * 13, seed=4).reshape(4, 13)

    def fn(mesh):
        x = bridge.distribute(X, mesh, [Shard(1), Replicate()])
        return (x.median(dim=1).values.full_tensor(), x.kthvalue(3, dim=1).values.full_tensor(),
                x.topk(4, dim=1).values.full_tensor(), x.sort(dim=1).values.full_tensor(),
                x.max(dim=1).values.full_tensor(), x.median().full_tensor())

    want = (X.median(dim=1).values, X.kthvalue(3, dim=1).values, X.topk(4, dim=1).values, X.sort(dim=1).values,
            X.max(dim=1).values, X.median())
    for got in on_2x2(fn):
        for name, g, w in zip(("median.dim", "kthvalue", "topk", "sort", "max.dim", "median"), got, want):
            assert g.dtype == dtype and torch.equal(g, w), (name, g, w)


@pytest.mark.parametrize("method,dtype", [("byte", torch.uint8), ("char", torch.int8), ("short", torch.int16)])
def test_conversions_match_torch(method, dtype):
    """x.byte(), x.char(), x.short() from float and int64, and back to float32. Out of the dtype's
    range both wrap modulo 2^bits after truncation toward zero (-2.7 is 254 as uint8, 300.7 is 44):
    torch's result on x86, where its cast is C's (undefined there, so dtensor goes through int64)."""
    F = torch.tensor([0.0, 1.9, -2.7, 100.5, 127.0, -128.0, 3.0, 300.7, -200.2])
    I = torch.tensor([0, 255, -1, 300, 65535, -129, 7, 70000, -70000])  # int64 -> narrower wraps

    def fn(mesh):
        f = bridge.distribute(F, mesh, [Shard(0), Replicate()])
        i = bridge.distribute(I, mesh, [Replicate(), Shard(0)])
        a, b = getattr(f, method)(), getattr(i, method)()
        return a.full_tensor(), b.full_tensor(), a.float().full_tensor()

    for a, b, back in on_2x2(fn):
        assert a.dtype == b.dtype == dtype
        assert torch.equal(a, getattr(F, method)())
        assert torch.equal(b, getattr(I, method)())
        assert torch.equal(back, getattr(F, method)().float())
