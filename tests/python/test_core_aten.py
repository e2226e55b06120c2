# The Core ATen op set (the ATen packets with an overload tagged torch.Tag.core) as data,
# tests/python/core_aten_ops.txt, checked against the installed torch, and how many of its packets
# dtensor runs natively: a registered op (one with a kernel) of that name, or an ATen alias on an
# op's definition (OpDef::aten). The others reach the bridge's torch._decomp fallback. The native
# count is a floor: it fails when an op is lost; raise it when ops are added.
import pathlib
import sys

import pytest

torch = pytest.importorskip("torch")

from dtensor import bridge  # noqa: E402

LIST = pathlib.Path(__file__).with_name("core_aten_ops.txt")
NATIVE_AT_LEAST = 164  # 2026-11-29, torch 2.15.0: 164 of 164 (the additions by date: docs/OPINFO.md)


def core_packets():
    """The aten packet names with at least one overload tagged torch.Tag.core, sorted. Every
    registered schema is enumerated: dir(torch.ops.aten) lists only the packets used so far in the
    process (counted that way, the set was 160 in a fresh interpreter and 161 after other tests)."""
    names = {s.name.partition("::")[2] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    core = set()
    for name in names:
        packet = getattr(torch.ops.aten, name, None)
        try:
            overloads = packet.overloads()
        except Exception:  # not an op packet
            continue
        if any(torch.Tag.core in getattr(packet, o).tags for o in overloads):
            core.add(name)
    return sorted(core)


def listed():
    return [line.strip() for line in LIST.read_text().splitlines() if line.strip() and not line.startswith("#")]


def serving_ops():
    """packet name -> the registered ops (with a kernel) the bridge routes it to: the op's own name
    (torch_bridge._registry), an ATen alias on its definition (torch_bridge._facts), or an ATen op
    whose bridge handler runs a registered op (torch_bridge._routed_to_registered: the batch norm
    forms over _native_batch_norm_legit_functional)."""
    registered = bridge._registry()
    serving = {}
    for name, op in [*((n, n) for n in registered), *((n, fact[0]) for n, fact in bridge._facts()[1].items()),
                     *((n, op) for n, op in bridge._routed_to_registered().items() if op in registered)]:
        serving.setdefault(name.partition(".")[0], set()).add(op)
    return serving


def native_packets():
    """The packet names served by a registered op (serving_ops)."""
    return set(serving_ops())


def test_the_list_is_the_installed_torchs_core_set():
    want, have = core_packets(), listed()
    added, gone = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    assert not added and not gone, (
        f"torch {torch.__version__}'s Core ATen set differs from {LIST.name}: new {added}, gone {gone}; "
        f"rewrite it with `python3 {pathlib.Path(__file__).name} --write` and review the coverage")


# The Core factories (no tensor argument, so torch never dispatches them to a DTensor) are registered
# ops (ops/factory/, run by dispatch/factory.h's call_factory with the mesh and output placements
# given), which dtensor's factories of the same names call (python/dtensor/factories.py): native, and
# reachable from Python (tests/python/test_factory_ops.py compares them with torch).
FACTORIES = ("arange", "empty", "empty_strided", "full", "rand", "randn", "randperm", "scalar_tensor")


def test_native_coverage_of_the_core_set(summary):
    import dtensor

    core = listed()
    native = native_packets()
    have = [n for n in core if n in native]
    missing = [n for n in core if n not in native]
    decomposable = [n for n in missing if any(
        getattr(getattr(torch.ops.aten, n), o) in torch._decomp.decomposition_table
        for o in getattr(torch.ops.aten, n).overloads())]
    summary(f"Core ATen: {len(have)} of {len(core)} packets native; of the other {len(missing)}, "
            f"{len(decomposable)} by a torch._decomp decomposition the bridge runs")
    print("  native:", " ".join(have))
    print("  by decomposition:", " ".join(decomposable))
    print("  the bridge's own handlers or none:", " ".join(n for n in missing if n not in decomposable))
    assert len(have) >= NATIVE_AT_LEAST, f"{len(have)} native Core ATen packets, fewer than {NATIVE_AT_LEAST}"
    assert set(FACTORIES) <= set(core), "a listed factory left the Core ATen set: update the list"
    assert all(hasattr(dtensor, n) for n in FACTORIES), [n for n in FACTORIES if not hasattr(dtensor, n)]
    assert set(FACTORIES) <= native, sorted(set(FACTORIES) - native)


@pytest.mark.parametrize("placements", [("S0", "S1"), ("S0", "S0"), ("R", "S1"), ("P", "R")])
def test_size_queries_and_scalar_reads_are_global(placements):
    """The size queries on a bridge tensor give the global tensor's (contiguous) sizes, strides and
    count, whatever the layout (uneven blocks included); _local_scalar_dense (.item()) of a 0-d
    tensor gives the global value, a Partial's reduced first. torch answers the size queries above
    dispatch (CompositeImplicitAutograd) from the wrapper's global metadata; _local_scalar_dense
    reaches the bridge and runs the registered op (ops/metadata/), as the size-query ops do when
    dispatched to (tests/python/test_metadata_ops.py compares those with torch)."""
    import math

    import dtensor as dt
    from dtensor import Partial, Replicate, Shard

    place = {"S0": Shard(0), "S1": Shard(1), "R": Replicate(), "P": Partial()}
    x = torch.randn(5, 3, dtype=torch.float64)
    a = torch.ops.aten

    def fn(world):
        mesh = dt.init_device_mesh("cpu", (2, 2))
        pl = [place[p] for p in placements]
        d = bridge.from_local(x / 4, mesh, pl, shape=x.shape) if "P" in placements else bridge.distribute(x, mesh, pl)
        s = bridge.from_local(torch.tensor(1.25, dtype=torch.float64), mesh, [Partial(), Replicate()]) \
            if "P" in placements else bridge.distribute(torch.tensor(1.25, dtype=torch.float64), mesh, [Replicate()] * 2)
        return ([a.sym_size.int(d, k) for k in range(2)], [a.sym_stride.int(d, k) for k in range(2)],
                a.sym_numel(d), a.sym_storage_offset(d), a.sym_is_contiguous(d), a._local_scalar_dense(s),
                tuple(d._local.shape))

    for sizes, strides, numel, offset, contiguous, value, block in dt.run_threads(4, fn):
        assert sizes == [5, 3] and strides == [3, 1] and numel == 15 and offset == 0 and contiguous
        assert value == (1.25 * 2 if "P" in placements else 1.25)
        assert math.prod(block) < 15 or placements == ("P", "R")  # a block, not the whole: the answers are global


if __name__ == "__main__" and "--write" in sys.argv:
    LIST.write_text(f"# torch {torch.__version__}: the ATen op packets with an overload tagged torch.Tag.core\n"
                    "# (tests/python/test_core_aten.py checks it against the installed torch).\n"
                    + "".join(n + "\n" for n in core_packets()))
