# ATen ops the bridge runs as torch's kernel on blocks with some dims whole, or as other ops
# (torch_bridge.py, "ops computed on blocks with some dims whole"): histc, isin, searchsorted, mode,
# unfold (and its backward), index_reduce, scatter with reduce=, addbmm. Each on a [2, 2] thread mesh
# with the layouts that matter to its rule (the dim it reads whole sharded, another dim sharded,
# uneven blocks, Partial inputs), against torch on the whole tensors: values, gradients where the op
# has them, and the output placements (which show whether the blocks kept their Shards).
import pytest

torch = pytest.importorskip("torch")

import dtensor  # noqa: E402
from dtensor import Partial, Replicate, Shard, bridge  # noqa: E402

G = torch.Generator().manual_seed(5)
X = torch.randn(5, 7, 3, generator=G, dtype=torch.float64)


def weight(o):
    return torch.arange(o.numel(), dtype=o.dtype).reshape(o.shape) % 3 - 1


def run(fn, *tensors_and_placements, grad=False):
    """fn on bridge tensors on a [2, 2] mesh: (placements of each output, whole outputs, whole
    gradients of sum(out * w) when grad)."""
    def rank(w):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        args = [bridge.distribute(t, mesh, p) for t, p in tensors_and_placements]
        leaves = [a.detach().requires_grad_() if grad and a.is_floating_point() else a for a in args]
        outs = fn(*leaves)
        outs = outs if isinstance(outs, tuple) else (outs,)
        placements = [tuple(o.placements) for o in outs]
        whole = [o.full_tensor().detach() for o in outs]
        grads = None
        if grad:  # weights laid out as the outputs: the gradients reaching the op's backward are too
            loss = sum((o * bridge.distribute(weight(o), mesh, [p if p.is_shard() else Replicate() for p in o.placements])
                        ).sum() for o in outs if o.is_floating_point())
            grads = [None if g is None else g.full_tensor()
                     for g in torch.autograd.grad(loss, [a for a in leaves if a.requires_grad], allow_unused=True)]
        return placements, whole, grads

    return dtensor.run_threads(4, rank)[0]


def reference(fn, *tensors, grad=False):
    leaves = [t.clone().requires_grad_() if grad and t.is_floating_point() else t for t in tensors]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads = None
    if grad:
        loss = sum((o * weight(o)).sum() for o in outs if o.is_floating_point())
        grads = torch.autograd.grad(loss, [a for a in leaves if a.requires_grad], allow_unused=True)
    return [o.detach() for o in outs], grads


def check(fn, *tensors_and_placements, grad=False, placements=None):
    got_placements, got, got_grads = run(fn, *tensors_and_placements, grad=grad)
    want, want_grads = reference(fn, *[t for t, _ in tensors_and_placements], grad=grad)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
    if grad:
        for g, w in zip(got_grads, want_grads):
            assert (g is None) == (w is None)
            if g is not None:
                torch.testing.assert_close(g, w, rtol=1e-12, atol=1e-12, equal_nan=True)
    if placements is not None:  # None for a mesh dim: any placement there
        assert len(got_placements[0]) == len(placements) and all(
            w is None or g == w for g, w in zip(got_placements[0], placements)), got_placements


def test_histc_sums_the_blocks_histograms():
    data = torch.randint(-20, 20, (9, 6), generator=G).double()
    hist = lambda x: torch.histc(x, bins=7, min=-10, max=15)  # noqa: E731
    check(hist, (data, [Shard(0), Shard(1)]), placements=[Partial("sum"), Partial("sum")])
    # The default range is the data's (a global min and max): a block's own would differ.
    check(lambda x: torch.histc(x, bins=5), (data, [Shard(1), Replicate()]))
    check(lambda x: torch.histc(x, bins=5), (torch.full((4,), 3.0, dtype=torch.float64), [Shard(0), Replicate()]))
    check(hist, (data, [Partial("sum"), Shard(0)]))


def test_isin_and_searchsorted_read_the_other_tensor_whole():
    elements = torch.randint(0, 12, (7, 5), generator=G)
    test = torch.randint(0, 12, (6,), generator=G)
    check(lambda e, t: torch.isin(e, t), (elements, [Shard(0), Shard(1)]), (test, [Shard(0), Replicate()]),
          placements=[Shard(0), Shard(1)])
    check(lambda e, t: torch.isin(e, t, invert=True), (elements, [Replicate(), Shard(0)]), (test, [Shard(0), Shard(0)]))
    seq = torch.sort(torch.randn(9, generator=G, dtype=torch.float64))[0]
    values = torch.randn(6, 5, generator=G, dtype=torch.float64)
    check(lambda s, v: torch.searchsorted(s, v, right=True), (seq, [Shard(0), Replicate()]),
          (values, [Shard(1), Shard(0)]), placements=[Shard(1), Shard(0)])
    rows = torch.sort(torch.randn(6, 9, generator=G, dtype=torch.float64), dim=1)[0]  # an N-d sequence
    check(lambda s, v: torch.searchsorted(s, v), (rows, [Shard(0), Shard(1)]), (values, [Shard(0), Replicate()]))


@pytest.mark.parametrize("placements", [[Shard(1), Shard(0)], [Shard(2), Shard(1)], [Partial("sum"), Shard(0)]])
def test_mode_reads_its_dim_whole(placements):
    ties = torch.randint(0, 3, (5, 7, 3), generator=G).double()
    check(lambda x: torch.mode(x, 1), (ties, placements), grad=True)
    check(lambda x: torch.mode(x, -1, keepdim=True), (ties, placements), grad=True)
    if placements[0] == Shard(2):  # the dims after the reduced one shift down: no move of them
        assert run(lambda x: torch.mode(x, 1), (ties, placements))[0][0] == (Shard(1), Replicate())


@pytest.mark.parametrize("placements", [[Shard(1), Shard(0)], [Shard(0), Shard(2)], [Partial("sum"), Shard(0)]])
def test_unfold_and_its_backward(placements):
    check(lambda x: x.unfold(1, 3, 2), (X, placements), grad=True)
    check(lambda x: torch.ops.aten.unfold_copy(x, 0, 2, 1), (X, placements), grad=True)
    if placements == [Shard(0), Shard(2)]:
        assert run(lambda x: x.unfold(1, 3, 2), (X, placements))[0][0] == (Shard(0), Shard(2))


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
def test_index_reduce(reduce):
    index = torch.tensor([0, 4, 0, 2, 4, 4])
    source = torch.randn(6, 7, 3, generator=G, dtype=torch.float64)
    for include_self in (True, False):
        check(lambda x, i, s: x.index_reduce(0, i, s, reduce, include_self=include_self),
              (X, [Shard(1), Shard(0)]), (index, [Shard(0), Replicate()]), (source, [Shard(2), Shard(0)]), grad=True)


def test_scatter_with_reduce_is_scatter_reduce():
    index = torch.randint(0, 5, (4, 7, 3), generator=G)
    src = torch.randn(4, 7, 3, generator=G, dtype=torch.float64)
    for reduce in ("add", "multiply"):
        check(lambda x, i, s: torch.scatter(x, 0, i, s, reduce=reduce),
              (X, [Shard(1), Shard(0)]), (index, [Shard(2), Replicate()]), (src, [Replicate(), Shard(1)]))
        check(lambda x, i: torch.scatter(x, 0, i, 1.5, reduce=reduce), (X, [Shard(2), Shard(1)]), (index, [Shard(1), Shard(0)]))

    def rank(w):
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        x, i = bridge.distribute(X, mesh), bridge.distribute(index, mesh)
        with pytest.raises(dtensor.DTensorError, match=r"scatter.*reduce = 'max'; accepted: 'add', 'multiply'"):
            torch.ops.aten.scatter.value_reduce(x, 0, i, 1.5, reduce="max")
        return True

    assert all(dtensor.run_threads(4, rank))


def test_addbmm():
    b1 = torch.randn(6, 5, 4, generator=G, dtype=torch.float64)
    b2 = torch.randn(6, 4, 3, generator=G, dtype=torch.float64)
    x = torch.randn(5, 3, generator=G, dtype=torch.float64)
    for beta, alpha in ((1, 1), (0.5, -2), (0, 3)):
        check(lambda s, a, b: torch.addbmm(s, a, b, beta=beta, alpha=alpha),
              (x, [Shard(0), Replicate()]), (b1, [Shard(0), Shard(1)]), (b2, [Shard(0), Replicate()]), grad=True)
    nan = torch.full((5, 3), float("nan"), dtype=torch.float64)  # beta = 0 ignores self, NaN included
    check(lambda s, a, b: torch.addbmm(s, a, b, beta=0), (nan, [Replicate(), Replicate()]),
          (b1, [Shard(0), Replicate()]), (b2, [Replicate(), Shard(2)]))


@pytest.mark.parametrize("n", [3, 1])  # uneven batch; 1 sample: a rank with an empty block
def test_transposed_convolution_keeps_the_batch_sharded(n):
    x = torch.randn(n, 4, 5, 6, generator=G, dtype=torch.float64)
    w = torch.randn(4, 3, 3, 2, generator=G, dtype=torch.float64)
    bias = torch.randn(3, generator=G, dtype=torch.float64)
    conv = lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1)  # noqa: E731
    check(conv, (x, [Shard(0), Replicate()]), (w, [Replicate(), Shard(1)]), (bias, [Shard(0), Replicate()]),
          grad=True, placements=[Shard(0), Replicate()])
    check(conv, (x, [Partial("sum"), Shard(0)]), (w, [Replicate(), Replicate()]), (bias, [Replicate(), Replicate()]),
          grad=True)
    conv1 = lambda x, w: torch.nn.functional.conv_transpose1d(x, w, groups=2, dilation=2)  # noqa: E731
    check(conv1, (x[:, :, 0], [Shard(0), Shard(0)]), (w[:, :, :, 0], [Shard(0), Replicate()]), grad=True)


def test_as_strided_addresses_the_whole_tensor():
    x = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    # dtensor's as_strided (ops/strided/) takes no Shard: the one on mesh dim 0 is gathered; the one
    # on mesh dim 1 may instead become a Partial(sum) piece (zeros off the block, no communication).
    check(lambda x: torch.as_strided(x, (2, 3), (1, 4), 1), (x, [Shard(0), Shard(1)]), grad=True,
          placements=[Replicate(), None])
    src = torch.randn(2, 3, generator=G, dtype=torch.float64)
    check(lambda x, s: torch.as_strided_scatter(x, s, (2, 3), (1, 4), 2), (x, [Shard(1), Replicate()]),
          (src, [Shard(0), Shard(1)]), grad=True)
    check(lambda x: torch.nonzero_static(x, size=9, fill_value=-1), ((x % 3 == 0).double(), [Shard(0), Shard(1)]))

    def rank(w):  # views do not share their base's storage: torch would address x's elements
        mesh = dtensor.init_device_mesh("cpu", (2, 2))
        d = bridge.distribute(x, mesh, [Shard(0), Replicate()])
        for view in (d.t(), d[1:]):
            with pytest.raises(dtensor.DTensorError, match=r"as_strided.*a view.*\.clone\(\) it first"):
                torch.as_strided(view, (2, 2), (1, 2))
        return True

    assert all(dtensor.run_threads(4, rank))


@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
def test_nll_loss_and_cross_entropy_with_class_weights(reduction):
    logp = torch.log_softmax(torch.randn(6, 5, generator=G, dtype=torch.float64), 1)
    target = torch.tensor([0, 4, -100, 2, 4, 1])  # one ignored
    weight = torch.rand(5, generator=G, dtype=torch.float64) + 0.5
    # (the weight is an input without a gradient: ATen's nll_loss has none for it)
    loss = lambda x, t, w: torch.nn.functional.nll_loss(x, t, weight=w.detach(), reduction=reduction)  # noqa: E731
    for placements in ([Shard(0), Replicate()], [Shard(1), Shard(0)], [Partial("sum"), Shard(1)]):
        check(loss, (logp, placements), (target, [Shard(0), Replicate()]), (weight, [Replicate(), Shard(0)]),
              grad=True)
    # K-dim input [N, C, d] and cross_entropy (log_softmax + nll_loss), the weight a plain tensor as
    # an nn.CrossEntropyLoss(weight=...) buffer would be.
    x = torch.randn(4, 5, 3, generator=G, dtype=torch.float64)
    t = torch.randint(0, 5, (4, 3), generator=G)
    ce = lambda x, t: torch.nn.functional.cross_entropy(x, t, weight=weight, reduction=reduction)  # noqa: E731
    check(ce, (x, [Shard(2), Shard(0)]), (t, [Shard(1), Shard(0)]), grad=True)


def test_histogram_sums_the_blocks_over_torchs_edges():
    data = torch.randn(9, 6, generator=G, dtype=torch.float64)
    w = torch.rand(9, 6, generator=G, dtype=torch.float64)
    h = lambda x: torch.histogram(x, bins=7)  # noqa: E731  (edges from the data's global range)
    check(h, (data, [Shard(0), Shard(1)]), placements=[Partial("sum"), Partial("sum")])
    check(lambda x: torch.histogram(x, bins=4, range=(-1.0, 2.0), density=True), (data, [Shard(1), Replicate()]))
    check(lambda x, w: torch.histogram(x, bins=5, weight=w), (data, [Shard(0), Replicate()]),
          (w, [Shard(1), Shard(0)]))
    edges = torch.tensor([-3.0, -0.5, 0.0, 0.25, 3.0], dtype=torch.float64)
    check(lambda x, e: torch.histogram(x, bins=e), (data, [Partial("sum"), Shard(0)]), (edges, [Shard(0), Replicate()]))
    same = torch.full((5,), 2.0, dtype=torch.float64)  # torch's rule for equal ends, through its own edges
    check(lambda x: torch.histogram(x, bins=3), (same, [Shard(0), Replicate()]))


@pytest.mark.parametrize("reduce", ["sum", "mean", "max", "min", "prod"])
def test_segment_reduce_keeps_the_other_dims_sharded(reduce):
    data = torch.randn(6, 4, 3, generator=G, dtype=torch.float64)
    lengths = torch.tensor([2, 1, 3, 0])  # an empty segment: initial
    seg = lambda d, n: torch.segment_reduce(d, reduce, lengths=n, initial=0.5)  # noqa: E731
    check(seg, (data, [Shard(1), Shard(2)]), (lengths, [Shard(0), Replicate()]), grad=True,
          placements=[Shard(1), Shard(2)])
    check(seg, (data, [Shard(0), Replicate()]), (lengths, [Replicate(), Replicate()]), grad=True)
    offsets = torch.tensor([0, 2, 2, 5, 6])
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, initial=0.5),
          (data, [Partial("sum"), Shard(2)]), (offsets, [Shard(0), Shard(0)]), grad=True)
    # A sum from 0 is linear: a Partial input stays Partial (an initial value would count per piece).
    check(lambda d, o: torch.segment_reduce(d, reduce, offsets=o, unsafe=True),
          (data, [Partial("sum"), Shard(2)]), (offsets, [Replicate(), Replicate()]), grad=True,
          placements=[Partial("sum"), Shard(2)] if reduce == "sum" else [Replicate(), Shard(2)])


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_keeps_columns_and_sums_rows(mode):
    """The table's column Shards kept; a row (vocabulary) Shard gives a Partial(sum) output for sum
    and mean (each rank adds the rows it holds: ops/embedding/bag_rules.cc), and is gathered for max."""
    weight = torch.randn(10, 6, generator=G, dtype=torch.float64)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0])
    offsets = torch.tensor([0, 2, 2, 6])  # an empty bag
    bag = lambda w, i, o: torch.nn.functional.embedding_bag(i, w, o, mode=mode, padding_idx=4)  # noqa: E731
    # A row Shard (sum, mean) gives a Partial(sum). The indices and offsets given sharded are
    # gathered first; among the layouts that then cost the same the engine's tie-break picks, so
    # only the row-sharded one is pinned.
    for placements, out in (([Replicate(), Shard(1)], None), ([Shard(1), Shard(0)], None),
                            ([Shard(0), Replicate()], [Partial("sum"), None] if mode != "max" else None)):
        check(bag, (weight, placements), (indices, [Shard(0), Replicate()]), (offsets, [Replicate(), Shard(0)]),
              grad=True, placements=out)
    if mode == "sum":  # per-sample weights, and their gradient summed over the column shards
        psw = torch.rand(9, generator=G, dtype=torch.float64)
        check(lambda w, i, o, s: torch.nn.functional.embedding_bag(i, w, o, mode="sum", per_sample_weights=s,
                                                                   include_last_offset=True),
              (weight, [Shard(1), Replicate()]), (indices, [Replicate(), Replicate()]),
              (offsets, [Replicate(), Replicate()]), (psw, [Shard(0), Replicate()]), grad=True)


def test_bilinear_through_trilinear():
    x1 = torch.randn(5, 4, generator=G, dtype=torch.float64)
    x2 = torch.randn(5, 3, generator=G, dtype=torch.float64)
    w = torch.randn(6, 4, 3, generator=G, dtype=torch.float64)
    bias = torch.randn(6, generator=G, dtype=torch.float64)
    bil = lambda a, c, w, b: torch.nn.functional.bilinear(a, c, w, b)  # noqa: E731
    check(bil, (x1, [Shard(0), Replicate()]), (x2, [Shard(0), Shard(1)]), (w, [Replicate(), Shard(0)]),
          (bias, [Shard(0), Replicate()]), grad=True)
    check(bil, (x1, [Partial("sum"), Shard(1)]), (x2, [Replicate(), Replicate()]), (w, [Shard(2), Shard(1)]),
          (bias, [Replicate(), Replicate()]), grad=True)


def test_histogramdd_sums_the_blocks_over_torchs_edges():
    pts = torch.randn(11, 3, generator=G, dtype=torch.float64)
    w = torch.rand(11, generator=G, dtype=torch.float64)
    check(lambda x: torch.histogramdd(x, bins=[2, 3, 4])[0], (pts, [Shard(0), Replicate()]),
          placements=[Partial("sum"), Replicate()])
    check(lambda x: torch.histogramdd(x, bins=3, density=True)[0], (pts, [Shard(0), Shard(1)]))
    check(lambda x, w: torch.histogramdd(x, bins=2, range=[-1.0, 1.0] * 3, weight=w)[0],
          (pts, [Shard(1), Shard(0)]), (w, [Replicate(), Shard(0)]))
    edges = [torch.tensor([-3.0, 0.0, 3.0], dtype=torch.float64)] * 3
    check(lambda x: torch.histogramdd(x, bins=edges)[0], (pts, [Partial("sum"), Shard(0)]))
    check(lambda x: torch.histogramdd(x, bins=2)[1][1], (pts, [Shard(0), Shard(0)]))  # the edges


def test_var_mean_over_every_dim_keeps_them():
    # Found by the op_db oracle on its 8th sample: var_mean(x, dim=None, keepdim=True) gave a 0-d mean.
    x = torch.randn(5, 4, 3, generator=G, dtype=torch.float64)
    for kw in ({"dim": None, "correction": 0, "keepdim": True}, {"correction": 0.5, "keepdim": True}, {"dim": None}):
        check(lambda t: torch.var_mean(t, **kw), (x, [Shard(0), Shard(2)]), grad=True)
        check(lambda t: torch.std_mean(t, **kw), (x, [Partial("sum"), Shard(1)]), grad=True)


def test_min_and_max_with_empty_blocks():
    # Found by the op_db oracle (torch.cov, its 7th sample): 2 elements on S(0), S(0) over [2, 2] leave
    # two ranks empty blocks; ATen's amin refused to reduce them on those ranks alone and the others
    # waited in the collective until the timeout.
    x = torch.tensor([3.0, -1.0], dtype=torch.float64)
    for f in (torch.amin, lambda t: torch.amax(t, 0), lambda t: t.min(), lambda t: t.max(),
              lambda t: torch.linalg.vector_norm(t, float("inf"))):
        check(f, (x, [Shard(0), Shard(0)]), grad=True)
    n = torch.tensor([[4, -2, 7]])
    check(lambda t: torch.amin(t, 1, keepdim=True), (n, [Shard(1), Shard(1)]))
    check(lambda t: torch.cov(t, aweights=torch.tensor([0.5, 2.0])), (x, [Shard(0), Shard(0)]))
