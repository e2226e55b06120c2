# grouped_mm against torch._grouped_mm (torch 2.15 runs it on the CPU), forward and backward, every
# form, single device and sharded the MoE ways (experts on one mesh dim, their N columns on the other);
# torch has no OpInfo entry for it (tests/python/test_opinfo.py).
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (scripts/setup_python.sh)")
import dtensor  # noqa: E402
from dtensor import Replicate, Shard  # noqa: E402

rng = np.random.default_rng(16)
OFFS = np.array([12, 12, 40, 56], dtype=np.int32)  # an empty group; rows past 56 belong to none

# (a shape, b shape, offs): torch needs 16-byte strides, so K and N are multiples of 4.
FORMS = {
    "rows": ((64, 16), (4, 16, 8), OFFS),            # a[M, K] @ b[G, K, N], groups over M
    "contraction": ((8, 64), (64, 12), OFFS),        # a[M, K] @ b[K, N], groups over K -> [G, M, N]
    "cols": ((4, 8, 16), (16, 64), OFFS),            # a[G, M, K] @ b[K, N], groups over N
    "batched": ((4, 8, 16), (4, 16, 12), None),      # a[G, M, K] @ b[G, K, N]
}


def covered_out(form, offs):
    """The part of the output torch writes: it leaves rows (cols) past offs[-1] uninitialized."""
    end = None if offs is None else int(offs[-1])
    return {"rows": np.s_[:end], "cols": np.s_[:, :end]}.get(form, np.s_[:])


def torch_reference(form, a, b, offs):
    ta = torch.tensor(a, requires_grad=True)
    tb = torch.tensor(b, requires_grad=True)
    out = torch._grouped_mm(ta, tb, offs=None if offs is None else torch.tensor(offs))
    w = torch.tensor(rng.standard_normal(tuple(out.shape)).astype(np.float32))
    keep = covered_out(form, offs)
    (out[keep] * w[keep]).sum().backward()
    return out.detach().numpy()[keep], ta.grad.numpy(), tb.grad.numpy(), w.numpy()[keep]


@pytest.mark.parametrize("form", sorted(FORMS))
def test_matches_torch_forward_and_backward(form):
    sa, sb, offs = FORMS[form]
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    want, ga, gb, w = torch_reference(form, a, b, offs)
    keep = covered_out(form, offs)

    def fn(mesh, rank):
        da = dtensor.distribute_tensor(a, mesh, [Replicate()]).requires_grad_()
        db = dtensor.distribute_tensor(b, mesh, [Replicate()]).requires_grad_()
        args = [da, db] + ([] if offs is None else [dtensor.distribute_tensor(offs, mesh, [Replicate()])])
        out = dtensor.ops.grouped_mm(*args)
        full = out.full_tensor()
        wd = np.zeros(full.shape, dtype=np.float32)
        wd[keep] = w
        dtensor.ops.sum(dtensor.ops.mul(out, dtensor.distribute_tensor(wd, mesh, [Replicate()]))).backward()
        return full, da.grad.full_tensor(), db.grad.full_tensor()

    # torch leaves the gradient entries past offs[-1] along the grouped dim uninitialized too;
    # dtensor's are zero.
    end = None if offs is None else int(offs[-1])
    covered_a = {"rows": np.s_[:end], "contraction": np.s_[:, :end]}.get(form, np.s_[:])
    covered_b = {"contraction": np.s_[:end], "cols": np.s_[:, :end]}.get(form, np.s_[:])

    def check(got, ref, covered):
        np.testing.assert_allclose(got[covered], ref[covered], rtol=1e-5, atol=1e-5)
        rest = got.copy()
        rest[covered] = 0
        assert not rest.any()

    for full, got_ga, got_gb in dtensor.run_threads(1, lambda world: fn(dtensor.init_device_mesh("cpu", (1,)), 0)):
        # want is torch's written part (a leading block); dtensor zeroes the rows / cols past offs[-1].
        check(full, np.pad(want, [(0, f - n) for f, n in zip(full.shape, want.shape)]), keep)
        check(got_ga, ga, covered_a)
        check(got_gb, gb, covered_b)


def test_experts_sharded_on_ep_and_columns_on_tp_match_torch():
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((4, 16, 8)).astype(np.float32)
    want = torch._grouped_mm(torch.tensor(a), torch.tensor(b), offs=torch.tensor(OFFS)).numpy()[:56]

    def fn(world):
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("ep", "tp"))
        out = dtensor.ops.grouped_mm(dtensor.distribute_tensor(a, mesh, [Replicate(), Replicate()]),
                                     dtensor.distribute_tensor(b, mesh, [Shard(0), Shard(2)]),
                                     dtensor.distribute_tensor(OFFS, mesh, [Replicate(), Replicate()]))
        return out.placements, out.full_tensor()

    for placements, full in dtensor.run_threads(4, fn):
        assert str(placements[1]) in ("S(1)", "Shard(dim=1)")  # N stays split on tp: no collective
        np.testing.assert_allclose(full[:56], want, rtol=1e-5, atol=1e-5)
        assert not full[56:].any()


def test_bad_offsets_name_the_op_and_shapes():
    a = rng.standard_normal((64, 16)).astype(np.float32)
    b = rng.standard_normal((4, 16, 8)).astype(np.float32)

    def fn(world):
        mesh = dtensor.init_device_mesh("cpu", (1,))
        d = lambda x: dtensor.distribute_tensor(x, mesh, [Replicate()])  # noqa: E731
        with pytest.raises(dtensor.DTensorError, match=r"grouped_mm\(float32\[64, 16\].*offs\[2\] = 5"):
            dtensor.ops.grouped_mm(d(a), d(b), d(np.array([12, 12, 5, 56], dtype=np.int32))).full_tensor()
        with pytest.raises(dtensor.DTensorError, match=r"grouped_mm.*int32"):
            dtensor.ops.grouped_mm(d(a), d(b), d(OFFS.astype(np.int64)))
        return True

    assert dtensor.run_threads(1, fn) == [True]
