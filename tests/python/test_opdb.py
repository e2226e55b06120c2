# PyTorch's whole op_db through dtensor's bridge (tests/python/opdb_oracle.py): every OpInfo entry's
# first samples, forward and backward (torch autograd on both sides), on a 1-rank mesh and on a [2, 2]
# thread mesh with seeded random placements and random Partial pieces, against torch on one device.
# Prints the per-entry table and the totals. Fails on any mismatch (a wrong value or gradient given
# without an error), on an error that is not dtensor's refusal naming the op (UnsupportedOpError,
# DTensorError) unless reviewed below, and when fewer entries pass than the floors (raise them when
# entries are added; the counts by date are in docs/OPINFO.md).
import collections

import pytest

pytest.importorskip("torch", reason="torch is not installed: the op_db oracle needs it (scripts/setup_python.sh)")
pytest.importorskip("expecttest", reason="expecttest is not installed: torch's op_db imports it (scripts/setup_python.sh)")

import opdb_oracle as oracle  # noqa: E402

FORWARD_AT_LEAST = 674   # 2026-11-30, torch 2.15.0, of 703 entries (byte, char, short since the narrow dtypes)
BACKWARD_AT_LEAST = 546  # 2026-11-30: of the 556 entries torch differentiates (OpInfo supports_autograd)
CORE_COMPARED_AT_LEAST = 147  # Core ATen packets a passing sample compared with torch, 2026-11-29: 147 of 164

# Errors other than dtensor's refusals, reviewed: entry -> why.
# (tensor_split's, torch reading an indices tensor's data before dispatch, is gone: op_db's indices
# are passed as the host tensors they are, opdb_oracle.HOST_TENSORS.)
REVIEWED_ERRORS = {}
CLEAR = ("UnsupportedOpError", "DTensorError")
MESHES = [(1,), (2, 2)]


@pytest.fixture(scope="module")
def results():
    """entry name (with its variant) -> {mesh: rows of oracle.run_entry}."""
    engines = {m: oracle.BridgeEngine(m) for m in MESHES}
    out = {}
    for e in oracle.entries():
        out[oracle.entry_name(e)] = {m: oracle.run_entry(engines[m], e, mesh_ndim=len(m)) for m in MESHES}
    return out


def status(by_mesh, which):
    """An entry's worst status over the meshes (mismatch > error), else pass where it was compared
    on some mesh (a random op is compared on [2, 2] only: on 1 rank its draw is its own reference)."""
    st = [oracle.entry_status(rows, which) for rows in by_mesh.values()]
    for s in ("mismatch", "error", "pass"):
        if s in st:
            return s
    return "not compared"


def detail(by_mesh):
    for m, rows in by_mesh.items():
        for r in rows:
            if r[1] in ("mismatch", "error") or r[2] in ("mismatch", "error"):
                return f"{'x'.join(map(str, m))}: {r[3]}"
    return next((r[3] for rows in by_mesh.values() for r in rows if r[3]), "")


def test_opdb_table(results, summary):
    totals = collections.Counter()
    lines = [f"op_db through dtensor.bridge (tests/python/test_opdb.py; the first {oracle.MAX_SAMPLES} samples per "
             f"entry, meshes {', '.join('x'.join(map(str, m)) for m in MESHES)}):",
             f"{'entry':44} {'forward':13} {'backward':13} detail"]
    for name, by_mesh in sorted(results.items()):
        f, b = status(by_mesh, "forward"), status(by_mesh, "backward")
        totals["forward " + f] += 1
        totals["backward " + b] += 1
        lines.append(f"{name:44} {f:13} {b:13} {detail(by_mesh)[:110]}")
    n = len(results)
    # OpInfo's supports_autograd: the entries torch differentiates (the others have no backward to
    # compare: comparisons, integer and bitwise ops, random draws, factories).
    differentiable = {oracle.entry_name(e) for e in oracle.entries() if e.supports_autograd}
    grads = sum(status(results[name], "backward") == "pass" for name in differentiable if name in results)
    for which in ("forward", "backward"):
        c = {s: totals[f"{which} {s}"] for s in ("pass", "not compared", "error", "mismatch")}
        of_differentiable = (f" ({grads} of the {len(differentiable)} entries torch differentiates, "
                             f"{100 * grads / max(1, len(differentiable)):.1f}%)" if which == "backward" else
                             f" ({100 * c['pass'] / max(1, n):.1f}%)")
        lines.append(f"op_db {which}: {c['pass']} of {n} entries passed{of_differentiable}, {c['not compared']} not "
                     f"compared, {c['error']} refused or failed, {c['mismatch']} mismatched")
    summary("\n".join(lines))
    assert totals["forward pass"] >= FORWARD_AT_LEAST, lines[-2]
    assert totals["backward pass"] >= BACKWARD_AT_LEAST, lines[-1]
    # A backward that passes for an entry torch does not differentiate would be a miscount.
    assert grads == totals["backward pass"], (grads, totals["backward pass"])


def test_no_entry_gives_a_wrong_result(results):
    bad = [f"{name} ({'x'.join(map(str, m))}, sample {r[0].index}): {r[3]}"
           for name, by_mesh in results.items() for m, rows in by_mesh.items() for r in rows
           if "mismatch" in (r[1], r[2])]
    assert not bad, f"{len(bad)} samples differ from torch without an error:\n" + "\n".join(bad[:30])


def test_errors_are_refusals_that_name_the_op(results):
    bad = []
    for name, by_mesh in results.items():
        for m, rows in by_mesh.items():
            for r in rows:
                if "error" in (r[1], r[2]) and not r[3].startswith(tuple(f"error: {c}" for c in CLEAR)):
                    if name.split(".")[0] in REVIEWED_ERRORS and REVIEWED_ERRORS[name.split(".")[0]] in r[3]:
                        continue
                    bad.append(f"{name} ({'x'.join(map(str, m))}, sample {r[0].index}): {r[3]}")
    assert not bad, "errors that are not dtensor's refusals:\n" + "\n".join(bad[:30])


def test_reviewed_errors_still_occur(results):
    stale = [n for n, why in REVIEWED_ERRORS.items()
             if not any(why in r[3] for by_mesh in [results.get(n, {})] for rows in by_mesh.values() for r in rows)]
    assert not stale, f"reviewed errors no longer seen (remove them): {stale}"


def test_core_aten_packets_compared_with_torch(results, summary):
    """Which Core ATen packets (tests/python/core_aten_ops.txt) the oracle compared with torch: the
    ATen ops torch dispatched for a sample's reference forward (or its gradients) whose bridge run
    passed on some mesh, random samples left out (those are compared with the bridge's own draw).
    The bridge receives the same ops for the same call (both below autograd and CompositeImplicit
    decompositions), so each such op's output reached a compared value. The gradients' set also holds
    the oracle's own loss and its backward (mul, sum), ops compared elsewhere anyway. A native op
    that torch's Python API never dispatches (avg_pool1d and adaptive_avg_pool1d decompose above
    dispatch; copy is reached as copy_) cannot be compared this way."""
    from test_core_aten import listed, native_packets

    core = listed()
    native = native_packets()
    seen = set()
    for by_mesh in results.values():
        for rows in by_mesh.values():
            for case, fwd, bwd, _ in rows:
                if case.random:
                    continue
                if fwd == "pass":
                    seen |= {o.split(".", 1)[1] for o in case.aten_forward if o.startswith("aten.")}
                if bwd == "pass":
                    seen |= {o.split(".", 1)[1] for o in case.aten_backward if o.startswith("aten.")}
    compared = [n for n in core if n in seen]
    native_core = [n for n in core if n in native]
    native_compared = [n for n in native_core if n in seen]
    lines = [f"Core ATen packets compared with torch by passing op_db samples: {len(compared)} of {len(core)}; "
             f"of the {len(native_core)} native ones, {len(native_compared)}",
             "  native, not compared: " + " ".join(n for n in native_core if n not in seen),
             "  compared, not native: " + " ".join(n for n in compared if n not in native)]
    summary("\n".join(lines))
    # The native backward packets have no samples of their own (test_opinfo compares the others):
    # each must be reached by a gradient compared here.
    backward_unseen = [n for n in native_core if n.endswith("_backward") and n not in seen]
    assert not backward_unseen, f"native backward packets no op_db gradient compared with torch: {backward_unseen}"
    assert len(compared) >= CORE_COMPARED_AT_LEAST, lines[0]
