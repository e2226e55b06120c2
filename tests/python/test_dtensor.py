# The Python package against numpy as the independent reference: every DTensor result is compared
# with numpy computed on the same full data.
import numpy as np
import pytest

import dtensor
from dtensor import DTensor, Partial, Replicate, Shard

rng = np.random.default_rng(0)


def on_mesh(shape, fn, names=None):
    """Runs fn(mesh, rank) on prod(shape) thread ranks; returns the results by rank."""
    n = int(np.prod(shape))

    def rank_fn(world):
        mesh = dtensor.init_device_mesh("cpu", shape, mesh_dim_names=names)
        return fn(mesh, world.rank)

    return dtensor.run_threads(n, rank_fn)


def test_placements_spell_like_torch():
    assert repr(Shard(1)) == "S(1)" and Shard(1).dim == 1 and Shard(1).is_shard(1)
    assert Replicate().is_replicate() and Replicate().dim is None
    assert Partial().reduce_op == "sum" and Partial("max").reduce_op == "max"
    assert Shard(0) == Shard(0) and Shard(0) != Shard(1)
    with pytest.raises(dtensor.DTensorError, match="reduce_op 'prod'"):
        Partial("prod")


def test_mesh_shape_names_and_coordinates():
    out = on_mesh((2, 2), lambda m, r: (m.shape, m.mesh_dim_names, m.get_coordinate(), m.get_rank()),
                  names=("dp", "tp"))
    for rank, (shape, names, coord, mrank) in enumerate(out):
        assert shape == (2, 2) and names == ["dp", "tp"] and mrank == rank
        assert coord == [rank // 2, rank % 2]


@pytest.mark.parametrize("placements", [[Shard(0), Replicate()], [Shard(1), Shard(0)],
                                        [Replicate(), Shard(1)], [Partial(), Shard(0)]])
def test_distribute_then_full_tensor_is_identity(placements):
    x = rng.standard_normal((5, 6)).astype(np.float32)  # 5 rows: uneven over 2 ranks

    def fn(mesh, rank):
        d = dtensor.distribute_tensor(x, mesh, placements)
        assert d.shape == (5, 6) and list(d.placements) == placements
        return d.full_tensor()

    for full in on_mesh((2, 2), fn):
        np.testing.assert_array_equal(full, x)


def test_local_blocks_are_numpy_chunks():
    x = rng.standard_normal((8, 4))
    out = on_mesh((4,), lambda m, r: dtensor.distribute_tensor(x, m, [Shard(0)]).to_local())
    for rank, local in enumerate(out):
        np.testing.assert_array_equal(local, np.array_split(x, 4)[rank])
        assert local.dtype == np.float64


def test_weighted_shards_split_by_largest_remainder():
    # 10 rows by 3:2:2:1 (sum 8): floors 3,2,2,1, remainders 6,4,4,2 -> the 2 rows left go to ranks 0, 1.
    p = Shard(0, [3, 2, 2, 1])
    assert repr(p) == "S(0)[3:2:2:1]" and p.weights == [3, 2, 2, 1] and p.dim == 0 and p.is_shard(0)
    assert Shard(0).weights is None and Shard(0, [6, 2]) == Shard(0, [3, 1]) and Shard(0, [1, 1]) != Shard(0)
    with pytest.raises(dtensor.DTensorError, match="weight 0"):
        Shard(0, [1, 0])
    x = rng.standard_normal((10, 3))
    w = rng.standard_normal((3, 2))

    def fn(mesh, rank):
        y = dtensor.ops.mm(dtensor.distribute_tensor(x, mesh, [p]), dtensor.distribute_tensor(w, mesh, [Replicate()]))
        return y.placements, y.to_local(), y.full_tensor()

    bounds = np.cumsum([0, 4, 3, 2, 1])
    for rank, (placements, local, full) in enumerate(on_mesh((4,), fn)):
        assert placements == (p,)  # the rows keep their weighted split through mm
        np.testing.assert_allclose(local, (x @ w)[bounds[rank]:bounds[rank + 1]], rtol=1e-12)
        np.testing.assert_allclose(full, x @ w, rtol=1e-12)


def test_redistribute_matches_numpy():
    x = rng.standard_normal((6, 4)).astype(np.float32)

    def fn(mesh, rank):
        d = dtensor.distribute_tensor(x, mesh, [Shard(0), Replicate()])
        e = d.redistribute(mesh, [Replicate(), Shard(1)])
        assert list(e.placements) == [Replicate(), Shard(1)]
        return mesh.get_coordinate(), e.to_local()

    for (coord, local) in on_mesh((2, 2), fn):
        np.testing.assert_array_equal(local, np.array_split(x, 2, axis=1)[coord[1]])


def test_from_local_shares_memory_both_ways():
    def fn(mesh, rank):
        block = np.full((2, 3), float(rank), dtype=np.float32)
        d = DTensor.from_local(block, mesh, [Shard(0)])
        assert d.shape == (4, 3)
        view = d.to_local()
        view[0, 0] = 100.0 + rank  # written through the DTensor's view ...
        assert block[0, 0] == 100.0 + rank  # ... read through the caller's array
        block[1, 2] = -1.0  # and the other way
        assert view[1, 2] == -1.0
        return d.full_tensor()

    for full in on_mesh((2,), fn):
        np.testing.assert_array_equal(full[:, 0], [100.0, 0.0, 101.0, 1.0])
        np.testing.assert_array_equal(full[:, 2], [0.0, -1.0, 1.0, -1.0])


def test_mm_of_row_sharded_and_replicated_matches_numpy():
    a = rng.standard_normal((8, 5))
    b = rng.standard_normal((5, 3))

    def fn(mesh, rank):
        c = dtensor.ops.mm(dtensor.distribute_tensor(a, mesh, [Shard(0)]),
                           dtensor.distribute_tensor(b, mesh, [Replicate()]))
        return c.placements, c.full_tensor()

    for placements, full in on_mesh((4,), fn):
        assert placements == (Shard(0),)  # no communication needed: rows stay sharded
        np.testing.assert_allclose(full, a @ b, rtol=1e-12)


def test_add_and_sum_match_numpy():
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((4, 6)).astype(np.float32)

    def fn(mesh, rank):
        da = dtensor.distribute_tensor(a, mesh, [Shard(1)])
        db = dtensor.distribute_tensor(b, mesh, [Shard(0)])
        s = dtensor.ops.add(da, db, alpha=2.0)
        return s.full_tensor(), dtensor.ops.sum(s, dim=[1]).full_tensor()

    for full, rowsum in on_mesh((2,), fn):
        np.testing.assert_allclose(full, a + 2.0 * b, rtol=1e-6)
        np.testing.assert_allclose(rowsum, (a + 2.0 * b).sum(axis=1), rtol=1e-5)


def test_errors_are_dtensor_errors_naming_op_and_placements():
    a = rng.standard_normal((4, 6)).astype(np.float32)

    def fn(mesh, rank):
        da = dtensor.distribute_tensor(a, mesh, [Shard(0)])
        dtensor.ops.mm(da, da)  # [4, 6] @ [4, 6]: inner dims differ

    with pytest.raises(dtensor.DTensorError) as err:
        on_mesh((2,), fn)
    assert isinstance(err.value, ValueError)
    msg = str(err.value)
    assert msg.startswith("mm(") and "[S(0)]" in msg and "[4, 6]" in msg


def test_bad_placement_raises():
    def fn(mesh, rank):
        dtensor.distribute_tensor(np.zeros((4, 4), np.float32), mesh, [Shard(5)])

    with pytest.raises(dtensor.DTensorError, match="S\\(5\\)"):
        on_mesh((2,), fn)


def test_python_exception_in_a_rank_propagates_and_others_abort():
    def fn(world):
        mesh = dtensor.init_device_mesh("cpu", (2,))
        if world.rank == 1:
            raise KeyError("rank 1 failed")
        # rank 0 waits in a collective for rank 1, which never comes: the world is aborted
        dtensor.distribute_tensor(np.ones((2, 2)), mesh, [Shard(0)]).full_tensor()

    with pytest.raises(KeyError, match="rank 1 failed"):
        dtensor.run_threads(2, fn)


def test_init_device_mesh_outside_run_threads_raises():
    with pytest.raises(dtensor.DTensorError, match="run_threads"):
        dtensor.init_device_mesh("cpu", (2,))


def test_torch_tensors_go_in_and_out_without_copy():
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    def fn(mesh, rank):
        d = DTensor.from_local(t, mesh, [Replicate()])
        d.to_local()[0, 0] = 42.0
        out = torch.from_dlpack(d.to_local())  # and out again, still the same memory
        out[1, 2] = -7.0
        assert t[1, 2] == -7.0
        return float(t[0, 0])

    assert dtensor.run_threads(1, lambda w: fn(dtensor.init_device_mesh("cpu", (1,)), 0)) == [42.0]


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def test_any_registered_op_by_its_aten_name_matches_numpy():
    x = rng.standard_normal((8, 6))
    w = rng.standard_normal((6, 4))

    def fn(mesh, rank):
        dx = dtensor.distribute_tensor(x, mesh, [Shard(0), Shard(1)])
        dw = dtensor.distribute_tensor(w, mesh, [Replicate(), Replicate()])
        sm = dtensor.ops.softmax(dx, 1)                      # kwargs and positionals as ATen's
        cs = dtensor.ops.cumsum(dx, dim=1)                   # a scan over a sharded dim
        mx = dtensor.ops.call("max.dim", dx, 1)              # an overload by full name: values, indices
        mm = dtensor.ops.matmul(dx, dw)
        pw = dtensor.ops.pow(dx, 2)                          # bare name: the Tensor_Scalar overload
        return (sm.full_tensor(), cs.full_tensor(), mx[0].full_tensor(), mx[1].full_tensor(),
                mm.full_tensor(), pw.full_tensor())

    for sm, cs, mv, mi, mm, pw in on_mesh((2, 2), fn):
        np.testing.assert_allclose(sm, _softmax(x, 1), rtol=1e-6)
        np.testing.assert_allclose(cs, np.cumsum(x, axis=1), rtol=1e-6)
        np.testing.assert_allclose(mv, x.max(axis=1), rtol=0)
        np.testing.assert_array_equal(mi, x.argmax(axis=1))
        np.testing.assert_allclose(mm, x @ w, rtol=1e-6)
        np.testing.assert_allclose(pw, x ** 2, rtol=1e-12)


def test_unknown_op_and_bad_arguments_are_named():
    assert "mm" in dtensor.ops.names() and "cumsum" in dtensor.ops.names()
    with pytest.raises(AttributeError, match="no op 'nosuchop'"):
        dtensor.ops.nosuchop
    x = rng.standard_normal((4, 4))

    def fn(mesh, rank):
        dx = dtensor.distribute_tensor(x, mesh, [Shard(0)])
        with pytest.raises(dtensor.DTensorError, match="cumsum"):
            dtensor.ops.cumsum(dx, dim=7)
        with pytest.raises(dtensor.DTensorError, match="accepted: DTensor"):
            dtensor.ops.cumsum(dx, dim={"a": 1})
        return True

    assert all(on_mesh((2,), fn))


def test_backward_matches_the_analytic_gradients():
    # loss = sum(relu(x @ w)): dL/dw = x^T (mask), dL/dx = mask w^T with mask = (x @ w > 0).
    x = rng.standard_normal((8, 6))
    w = rng.standard_normal((6, 4))
    mask = (x @ w > 0).astype(np.float64)

    def fn(mesh, rank):
        dx = dtensor.distribute_tensor(x, mesh, [Shard(0)]).requires_grad_()
        dw = dtensor.distribute_tensor(w, mesh, [Replicate()])
        dw.requires_grad = True
        loss = dtensor.ops.sum(dtensor.ops.relu(dtensor.ops.mm(dx, dw)))
        assert loss.requires_grad and dx.grad is None
        loss.backward()
        return dx.grad.full_tensor(), dw.grad.full_tensor(), dx.grad.placements

    for gx, gw, placements in on_mesh((2,), fn):
        np.testing.assert_allclose(gx, mask @ w.T, rtol=1e-10)
        np.testing.assert_allclose(gw, x.T @ mask, rtol=1e-10)
        assert placements == (Shard(0),)  # the gradient keeps the input's layout


def test_explain_gives_the_engines_decision_as_a_dict():
    ans = dtensor.explain({"mesh": [4], "op": "mm", "args": [{"shape": [8, 16], "placements": ["S(0)"]},
                                                             {"shape": [16, 8], "placements": ["R"]}],
                           "run": True})
    assert ans["outputs"] == [{"dtype": "float32", "placements": ["S(0)"], "shape": [8, 8]}]
    assert [i["to"] for i in ans["inputs"]] == [["S(0)"], ["R"]]
    assert ans["collectives"] == [] and ans["run"]["match"] is True
    # S(1) @ S(0) contracts over the sharded dim: a Partial(sum) output, no communication.
    ans = dtensor.explain({"mesh": [4], "op": "mm", "args": [{"shape": [8, 16], "placements": ["S(1)"]},
                                                             {"shape": [16, 8], "placements": ["S(0)"]}]})
    assert ans["outputs"][0]["placements"] == ["P(sum)"] and ans["collectives"] == []
    with pytest.raises(dtensor.DTensorError, match="unsupported op 'nosuchop'"):
        dtensor.explain({"mesh": [4], "op": "nosuchop", "args": []})


def test_op_names_are_listed_before_any_op_ran():
    # Reproducer: ops.names() was empty in a fresh interpreter (the registry filled on first call).
    import subprocess, sys, os
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    out = subprocess.run([sys.executable, "-c", "import dtensor; print(len(dtensor.ops.names()))"],
                         env=dict(os.environ, PYTHONPATH=os.path.join(root, "python")),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and int(out.stdout) > 50, out.stdout + out.stderr


def test_rank_threads_compute_with_their_share_of_the_cores():
    # Reproducer: torch's OpenMP thread count is per thread, so rank threads computed with a pool of
    # every core each (a 16x64 mm through the bridge took 4 ms instead of 3 us under load).
    torch = pytest.importorskip("torch")
    import os
    env = os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS")
    expected = int(env) if env and env.isdigit() and int(env) >= 1 else max(1, len(os.sched_getaffinity(0)) // 2)
    before = torch.get_num_threads()
    assert dtensor.run_threads(2, lambda w: torch.get_num_threads()) == [expected, expected]
    assert torch.get_num_threads() == before


def test_int_add_and_sub_take_the_default_integer_alpha():
    # Reproducer (OpInfo oracle): the default alpha=1 reached the kernel as a float, and int64
    # tensors rejected it ("alpha 1 must be an integer").
    a = rng.integers(-9, 9, (5, 4))
    b = rng.integers(-9, 9, (4,))

    def fn(mesh, rank):
        da = dtensor.distribute_tensor(a, mesh, [Shard(0), Replicate()])
        db = dtensor.distribute_tensor(b, mesh, [Replicate(), Shard(0)])
        return (dtensor.ops.call("add", da, db).full_tensor(), dtensor.ops.call("sub", da, db).full_tensor(),
                dtensor.ops.call("add", da, db, alpha=3).full_tensor(),
                dtensor.ops.call("add.Scalar", da, 2).full_tensor())

    for add, sub, add3, add_scalar in on_mesh((2, 2), fn):
        assert add.dtype == np.int64 and add_scalar.dtype == np.int64
        np.testing.assert_array_equal(add, a + b)
        np.testing.assert_array_equal(sub, a - b)
        np.testing.assert_array_equal(add3, a + 3 * b)
        np.testing.assert_array_equal(add_scalar, a + 2)


@pytest.mark.parametrize("op, args, kwargs, expect", [
    ("sum", [[0]], {"keepdim": True}, lambda x: x),
    ("mean", [[-1]], {}, lambda x: x),
    ("amax", [[0]], {}, lambda x: x),
    ("prod", [0], {}, lambda x: x),
    ("logsumexp", [[0]], {"keepdim": True}, lambda x: x),
    ("var", [[0]], {"correction": 0}, lambda x: np.zeros_like(x)),
    ("softmax", [0], {}, lambda x: np.ones_like(x)),
    ("log_softmax", [-1], {}, lambda x: np.zeros_like(x)),
    ("squeeze", [[0]], {}, lambda x: x),
    ("transpose", [0, -1], {}, lambda x: x),
    ("max.dim", [0], {}, lambda x: (x, np.int64(0))),
    ("median.dim", [-1], {"keepdim": True}, lambda x: (x, np.int64(0))),
    ("kthvalue", [1], {}, lambda x: (x, np.int64(0))),
])
def test_a_zero_dim_tensor_takes_dim_0_and_reduces_to_itself(op, args, kwargs, expect):
    # Reproducer (OpInfo oracle): a 0-d input with dim 0 or -1 (valid in torch) crashed the
    # process: reductions, softmax and the selections indexed the shape they do not have.
    x = np.array(1.75)

    def fn(mesh, rank):
        out = dtensor.ops.call(op, dtensor.distribute_tensor(x, mesh, [Replicate(), Replicate()]), *args, **kwargs)
        return tuple(o.full_tensor() for o in out) if isinstance(out, tuple) else out.full_tensor()

    want = expect(x)
    for got in on_mesh((2, 2), fn):
        for g, w in zip(got, want) if isinstance(want, tuple) else [(got, want)]:
            assert g.shape == () and g.dtype == np.asarray(w).dtype
            np.testing.assert_allclose(g, w)


def test_div_rounding_modes_match_numpy_floor_divide_and_trunc():
    # div(rounding_mode=) was not in the schema (the OpInfo oracle's div samples were rejected);
    # floor division goes through fmod as torch's and Python's: 1.0 // 0.1 is 9, not 10.
    a = np.array([[1.0, -1.0, 7.5, 0.0, 5.0], [2.5, -7.0, 3.0, 1e-3, -0.3]])
    b = np.array([[0.1, 0.1, -2.5, -3.0, 2.0], [0.5, 2.0, -0.7, 7.0, 0.1]])
    ai, bi = np.array([7, -7, 9, -9, 0]), np.array([2, 2, -4, -4, 3])

    def fn(mesh, rank):
        da = dtensor.distribute_tensor(a, mesh, [Shard(1), Replicate()])
        db = dtensor.distribute_tensor(b, mesh, [Replicate(), Shard(0)])
        dai, dbi = (dtensor.distribute_tensor(v, mesh, [Shard(0), Replicate()]) for v in (ai, bi))
        return [dtensor.ops.call("div", x, y, rounding_mode=m).full_tensor()
                for x, y in ((da, db), (dai, dbi)) for m in ("floor", "trunc")] + [
            dtensor.ops.call("div.Scalar", dai, 4, rounding_mode="floor").full_tensor()]

    for floor, trunc, ifloor, itrunc, sfloor in on_mesh((2, 2), fn):
        np.testing.assert_array_equal(floor, np.floor_divide(a, b))
        np.testing.assert_array_equal(trunc, np.trunc(a / b))
        assert ifloor.dtype == np.int64 and sfloor.dtype == np.int64
        np.testing.assert_array_equal(ifloor, np.floor_divide(ai, bi))
        np.testing.assert_array_equal(itrunc, np.fix(ai / bi).astype(np.int64))
        np.testing.assert_array_equal(sfloor, np.floor_divide(ai, 4))


@pytest.mark.parametrize("op, scalar", [("mul.Scalar", np.inf), ("mul.Scalar", -np.inf), ("div.Scalar", 0.0),
                                        ("mul.Scalar", 2.5), ("div.Scalar", -4.0)])
def test_partial_sum_times_a_scalar_matches_the_value_times_it(op, scalar):
    # Reproducer (OpInfo reference inputs): P(sum) passed through x * inf, so pieces of both signs
    # gave inf - inf = NaN where the value times inf is +-inf; likewise x / 0.
    x = np.array([1.5, -2.0, 0.25, 3.0, -0.5])
    r = np.array([4.0, 1.0, -3.0, 0.5, 2.0])  # adversarial pieces: x + r and -r sum to x

    def fn(mesh, rank):
        d = DTensor.from_local(x + r if rank == 0 else -r, mesh, [Partial()])
        return dtensor.ops.call(op, d, scalar).full_tensor()

    with np.errstate(divide="ignore"):
        want = x * scalar if op == "mul.Scalar" else np.divide(x, scalar)
    for got in on_mesh((2,), fn):
        np.testing.assert_allclose(got, want)


def test_softmax_and_cumsum_take_a_dtype_as_aten_does():
    # softmax/log_softmax/cumsum/cumprod/prod rejected ATen's dtype argument (the OpInfo oracle's with_dtype
    # samples); the input is cast first, so an int64 tensor may take one. Sharded along `dim`, the
    # softmax stats step and the scan's carry exchange see the cast values too.
    x = rng.integers(-5, 6, (5, 7))

    def fn(mesh, rank):
        d = dtensor.distribute_tensor(x, mesh, [Shard(1), Shard(0)])
        return (dtensor.ops.call("softmax", d, 1, dtype="float64"),
                dtensor.ops.call("log_softmax", d, 1, "float32"),
                dtensor.ops.call("cumsum", d, 1, dtype="float64"),
                dtensor.ops.call("cumprod", d, 0, dtype="float64"),
                dtensor.ops.call("prod", d, [1], dtype="float32"))

    def full(out):
        return [(o.dtype, o.full_tensor()) for o in out]

    e = np.exp(x - x.max(axis=1, keepdims=True))
    for (sd, s), (ld, ls), (cd, cs), (pd, cp), (qd, pr) in on_mesh((2, 2), lambda m, r: full(fn(m, r))):
        assert (sd, ld, cd, pd, qd) == ("float64", "float32", "float64", "float64", "float32")
        np.testing.assert_array_equal(cp, np.cumprod(x, axis=0).astype(np.float64))
        np.testing.assert_allclose(pr, np.prod(x.astype(np.float64), axis=1), rtol=1e-6)
        np.testing.assert_allclose(s, e / e.sum(axis=1, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(ls, np.log(e / e.sum(axis=1, keepdims=True)), rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(cs, np.cumsum(x, axis=1).astype(np.float64))


def test_masked_fill_broadcasts_self_to_the_mask_and_sums_its_gradient_back():
    # masked_fill(self [6], mask [5, 6]) is [5, 6] in ATen (out of place); dtensor rejected it
    # (OpInfo oracle). Its gradient for self is summed back over the broadcast dim.
    x = rng.standard_normal(6)
    mask = rng.random((5, 6)) < 0.4

    def fn(mesh, rank):
        d = dtensor.distribute_tensor(x, mesh, [Replicate(), Shard(0)]).requires_grad_()
        m = dtensor.distribute_tensor(mask, mesh, [Shard(0), Shard(1)])
        out = dtensor.ops.call("masked_fill", d, m, -2.0)
        dtensor.ops.sum(out).backward()
        return out.full_tensor(), d.grad.full_tensor()

    for out, grad in on_mesh((2, 2), fn):
        np.testing.assert_array_equal(out, np.where(mask, -2.0, np.broadcast_to(x, (5, 6))))
        np.testing.assert_array_equal(grad, (~mask).sum(axis=0).astype(np.float64))


def test_openblas_runs_this_cpus_kernels():
    # Debian's OpenBLAS falls back to its SSE3 kernels on CPUs newer than its release unless
    # OPENBLAS_CORETYPE is set before it loads (dtensor/__init__.py sets it from the CPU's flags).
    with open("/proc/cpuinfo") as f:
        flags = set(next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []))
    core = dtensor._dtensor._blas_core()
    if {"avx2", "fma"} <= flags:
        assert core not in ("Prescott", "Core2", "Nehalem"), core


@pytest.mark.parametrize("bad", [9, -1])
def test_index_select_refuses_an_out_of_range_index_on_every_block(bad):
    # With self sharded along the indexed dim no block holds index 9 (or -1): each would give a zero
    # piece and the sum a silent zero row; every rank checks the range instead (ops/indexing).
    x = rng.standard_normal((9, 4)).astype(np.float32)
    idx = np.array([0, bad, 3], dtype=np.int64)

    def fn(mesh, rank):
        dx = dtensor.distribute_tensor(x, mesh, [Shard(0)])
        return dtensor.ops.index_select(dx, 0, dtensor.distribute_tensor(idx, mesh, [Replicate()])).full_tensor()

    with pytest.raises(dtensor.DTensorError) as err:
        on_mesh((3,), fn)
    assert "index_select(" in str(err.value) and f"index {bad} is out of range for a dim of size 9" in str(err.value)
    good = on_mesh((3,), lambda m, r: dtensor.ops.index_select(
        dtensor.distribute_tensor(x, m, [Shard(0)]),
        0, dtensor.distribute_tensor(np.array([8, 0, 8], dtype=np.int64), m, [Replicate()])).full_tensor())
    np.testing.assert_array_equal(np.asarray(good[0]), x[[8, 0, 8]])


def test_python_operators_are_the_registered_ops():
    # a @ b, +, -, *, / and unary - on DTensors and numbers, as torch.distributed.tensor's DTensor
    # has them (issue: `distribute_tensor(...) @ d` raised "unsupported operand type(s) for @").
    a = rng.standard_normal((5, 3))
    b = rng.standard_normal((3, 4))

    def fn(mesh, rank):
        da = dtensor.distribute_tensor(a, mesh, [Shard(0)])
        db = dtensor.distribute_tensor(b, mesh, [Replicate()])
        out = {"matmul": da @ db, "add": da + da, "radd": 1.5 + da, "sub": da - 2, "rsub": 2 - da,
               "mul": da * 3, "rmul": 3 * da, "div": da / 4, "tdiv": da / da, "neg": -da, "subt": da - da}
        for bad in (lambda: da @ b, lambda: b @ da, lambda: da + b, lambda: b * da):
            with pytest.raises(TypeError, match="distribute an array first"):
                bad()  # a numpy array is not a DTensor
        return {k: v.full_tensor() for k, v in out.items()}

    want = {"matmul": a @ b, "add": a + a, "radd": 1.5 + a, "sub": a - 2, "rsub": 2 - a, "mul": a * 3,
            "rmul": 3 * a, "div": a / 4, "tdiv": a / a, "neg": -a, "subt": a - a}
    for got in on_mesh((2,), fn):
        for k, v in want.items():
            np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_mesh_getitem_gives_the_sub_mesh_and_names_bad_keys():
    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        tp, both = mesh["tp"], mesh["dp", "tp"]
        errors = []
        for key in ("pp", 5, ("dp", 3)):
            try:
                mesh[key]
            except (dtensor.DTensorError, TypeError) as e:
                errors.append(str(e))
        return tp.shape, tp.get_coordinate(), both.shape, errors

    for r, (tp_shape, coord, both_shape, errors) in enumerate(dtensor.run_threads(4, rank)):
        assert tp_shape == (2,) and coord == [r % 2] and both_shape == (2, 2)
        assert len(errors) == 3 and "pp" in errors[0] and "tp" in errors[0]
        assert "accepted: a dim name or a tuple of dim names" in errors[1] and "accepted" in errors[2]
