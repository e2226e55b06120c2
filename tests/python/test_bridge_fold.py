# nn.Unfold / nn.Fold through the bridge: ATen's im2col and col2im, registered ops since 2026-11-29
# (ops/conv/fold_*.cc, kernels/cpu/fold.h), against torch on one device: values and gradients for
# batched and unbatched inputs with stride, padding and dilation, on a [2, 2] mesh with the batch,
# the channels or the blocks dim sharded. A blocks-sharded fold input gives a Partial(sum) output
# (each rank adds its blocks; the overlaps are summed by the reduction), where PyTorch DTensor would
# gather the input.
import pytest

import dtensor as dt
from dtensor import Replicate, Shard

torch = pytest.importorskip("torch")
from dtensor import bridge  # noqa: E402
F = torch.nn.functional

# (fold's output size, kernel, dilation, padding, stride, channels)
GEOMETRIES = [((6, 7), (2, 3), (1, 1), (0, 1), (1, 2), 4), ((7, 5), (3, 2), (2, 1), (1, 0), (2, 1), 2)]
# Placements of fold's input [N, C k, L] (unfold's input [N, C, H, W] takes those of its output's dims).
FOLD_LAYOUTS = {
    "batch": [Shard(0), Replicate()],
    "channels": [Shard(1), Replicate()],
    "blocks": [Shard(2), Replicate()],
    "blocks_twice": [Shard(2), Shard(2)],
    "batch_and_blocks": [Shard(0), Shard(2)],
    "replicated": [Replicate(), Replicate()],
}


def blocks(size, kernel, dilation, padding, stride):
    return [(size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1 for i in range(2)]


@pytest.mark.parametrize("geometry", range(len(GEOMETRIES)))
@pytest.mark.parametrize("layout", list(FOLD_LAYOUTS))
@pytest.mark.parametrize("batched", [True, False])
def test_fold_and_unfold_match_torch(geometry, layout, batched):
    size, kernel, dilation, padding, stride, ch = GEOMETRIES[geometry]
    kw = dict(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    b = blocks(size, kernel, dilation, padding, stride)
    g = torch.Generator().manual_seed(geometry)
    shape = (3, ch * kernel[0] * kernel[1], b[0] * b[1])
    cols = torch.randn(shape if batched else shape[1:], dtype=torch.float64, generator=g)
    img = torch.randn(((3,) if batched else ()) + (ch, *size), dtype=torch.float64, generator=g)
    w_fold = torch.randn(img.shape, dtype=torch.float64, generator=g)
    w_unfold = torch.randn(cols.shape, dtype=torch.float64, generator=g)

    c_ref, i_ref = cols.clone().requires_grad_(), img.clone().requires_grad_()
    folded, unfolded = F.fold(c_ref, size, **kw), F.unfold(i_ref, **kw)
    ((folded * w_fold).sum() + (unfolded * w_unfold).sum()).backward()

    placements = FOLD_LAYOUTS[layout]
    if not batched:  # the same dims without the batch
        placements = [Shard(p.dim - 1) if p.is_shard() and p.dim > 0 else Replicate() for p in placements]

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        c = bridge.distribute(cols, mesh, placements).requires_grad_()
        # unfold's input: the channel dim where fold's input has its rows, the batch alike
        img_pl = [p if not p.is_shard() or p.dim < (1 if batched else 0) + 1 else Replicate() for p in placements]
        i = bridge.distribute(img, mesh, img_pl).requires_grad_()
        f, u = F.fold(c, size, **kw), F.unfold(i, **kw)
        loss = (f * bridge.distribute(w_fold, mesh, [p if p.is_shard() else Replicate() for p in f.placements])).sum() + \
            (u * bridge.distribute(w_unfold, mesh, [p if p.is_shard() else Replicate() for p in u.placements])).sum()
        loss.backward()
        return (f.full_tensor(), u.full_tensor(), c.grad.full_tensor(), i.grad.full_tensor(), tuple(f.placements))

    for got_f, got_u, got_cg, got_ig, f_placements in dt.run_threads(4, fn):
        torch.testing.assert_close(got_f, folded.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_u, unfolded.detach(), rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_cg, c_ref.grad, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(got_ig, i_ref.grad, rtol=1e-12, atol=1e-12)
        if layout.startswith("blocks"):  # each rank's blocks summed where they overlap: no gather
            assert any(p.is_partial() for p in f_placements), f_placements


def test_fold_errors_name_the_op():
    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2,))
        x = bridge.distribute(torch.randn(2, 12, 9, dtype=torch.float64), mesh, [Shard(0)])
        with pytest.raises((dt.DTensorError, RuntimeError), match="col2im"):
            torch.ops.aten.col2im(x, [4, 5], [2, 3], [1, 1], [0, 1], [1, 1])  # 12 blocks there, 9 given
        with pytest.raises((dt.DTensorError, RuntimeError), match="col2im"):
            torch.ops.aten.col2im(bridge.distribute(torch.randn(2, 10, 9, dtype=torch.float64), mesh, [Shard(0)]),
                                  [4, 5], [2, 3], [1, 1], [0, 1], [1, 2])  # 10 rows: not a multiple of 6
        return True

    assert all(dt.run_threads(2, fn))
