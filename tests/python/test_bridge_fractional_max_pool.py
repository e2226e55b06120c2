# F.fractional_max_pool2d / 3d through the bridge (fractional_max_pool{2,3}d and their backward, no
# dtensor op: torch's kernels per (n, c) plane, torch_bridge._fractional_max_pool and
# _batch_dims_on_blocks), against torch on one device with the same random samples: output,
# indices and the input's gradient, with the batch and channels sharded (unevenly), a spatial dim
# sharded (gathered: a window spans it), a Partial input, samples given as a bridge tensor or as a
# plain tensor; plain samples that differ per rank (thread ranks share torch's generator) are rank
# 0's on every rank, and F's own draw gives every rank the same result.
import pytest

import dtensor as dt
from dtensor import Partial, Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402

F = torch.nn.functional
# dims -> (input shape [N, C, *spatial], kernel, output size): output sizes whose windows depend on
# the samples (a non-integer stride (in - k) / (out - 1)).
CASES = {2: ((3, 5, 11, 13), 2, (4, 5)), 3: ((3, 5, 7, 6, 5), 2, (3, 3, 2))}
LAYOUTS = {  # input placements on a [2, 2] mesh; the samples [N, C, dims] take the input's N / C shards
    "batch_and_channels": [Shard(0), Shard(1)],
    "channels_both": [Shard(1), Shard(1)],
    "spatial": [Shard(2), Replicate()],
    "partial": [Partial(), Shard(0)],
}


def pool(dims, x, samples):
    _, kernel, out = CASES[dims]
    f = F.fractional_max_pool2d if dims == 2 else F.fractional_max_pool3d
    return f(x, kernel, output_size=out, return_indices=True, _random_samples=samples)


def data(dims, seed):
    g = torch.Generator().manual_seed(seed)
    shape = CASES[dims][0]
    x = torch.randn(shape, dtype=torch.float64, generator=g)
    samples = torch.rand(shape[0], shape[1], dims, dtype=torch.float64, generator=g)
    w = torch.randn(shape[:2] + CASES[dims][2], dtype=torch.float64, generator=g)
    return x, samples, w


def reference(dims, x, samples, w):
    xr = x.clone().requires_grad_()
    out, idx = pool(dims, xr, samples)
    (out * w).sum().backward()
    return out.detach(), idx, xr.grad


def on_mesh(dims, x_pl, x, samples_of, w):
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        if any(p.is_partial() for p in x_pl):  # pieces x / 4 and 3 x / 4 on mesh dim 0
            piece = bridge.distribute(x, mesh, [Replicate(), x_pl[1]]).to_local() * (2 * mesh.get_coordinate()[0] + 1) / 4
            xi = bridge.from_local(piece, mesh, x_pl, shape=x.shape)
        else:
            xi = bridge.distribute(x, mesh, x_pl)
        xi.requires_grad_()
        out, idx = pool(dims, xi, samples_of(mesh))
        (out * bridge.distribute(w, mesh, [Replicate(), Replicate()])).sum().backward()
        return out.full_tensor(), idx.full_tensor(), xi.grad.full_tensor(), tuple(out.placements)

    return dt.run_threads(4, fn)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("dims", [2, 3])
def test_bridge_samples_match_torch(dims, layout):
    x, samples, w = data(dims, 5 + dims)
    want = reference(dims, x, samples, w)
    x_pl = LAYOUTS[layout]
    s_pl = [p if p.is_shard() and p.dim < 2 else Replicate() for p in x_pl]
    for out, idx, gx, placements in on_mesh(dims, x_pl, x, lambda mesh: bridge.distribute(samples, mesh, s_pl), w):
        torch.testing.assert_close(out, want[0], rtol=0, atol=0)
        assert torch.equal(idx, want[1])
        torch.testing.assert_close(gx, want[2], rtol=0, atol=0)
        if layout != "partial":  # the planes' shards kept, no gather of N or C
            assert [p.is_shard() for p in placements] == [p.is_shard() and p.dim < 2 for p in x_pl], placements


@pytest.mark.parametrize("dims", [2, 3])
def test_plain_samples_match_torch(dims):
    x, samples, w = data(dims, 1 + dims)
    want = reference(dims, x, samples, w)
    for out, idx, gx, _ in on_mesh(dims, LAYOUTS["batch_and_channels"], x, lambda mesh: samples, w):
        torch.testing.assert_close(out, want[0], rtol=0, atol=0)
        assert torch.equal(idx, want[1])
        torch.testing.assert_close(gx, want[2], rtol=0, atol=0)


def test_plain_samples_that_differ_are_rank_0s():
    x, samples, w = data(2, 3)
    others = torch.rand(samples.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    want = reference(2, x, samples, w)
    assert not torch.equal(reference(2, x, others, w)[1], want[1])  # the samples matter here
    results = on_mesh(2, LAYOUTS["batch_and_channels"], x,
                      lambda mesh: samples if mesh.get_coordinate() == [0, 0] else others, w)
    for out, idx, gx, _ in results:
        torch.testing.assert_close(out, want[0], rtol=0, atol=0)
        assert torch.equal(idx, want[1])
        torch.testing.assert_close(gx, want[2], rtol=0, atol=0)


def test_own_draw_is_the_same_on_every_rank():
    # F draws the samples from torch's generator (one per process; thread ranks share it)
    x, _, w = data(3, 4)

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        out = F.fractional_max_pool3d(bridge.distribute(x, mesh, [Shard(0), Shard(1)]), 2, output_size=(3, 3, 2))
        return out.full_tensor()

    first, *rest = dt.run_threads(4, fn)
    for o in rest:
        assert torch.equal(o, first)
