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
NATIVE_AT_LEAST = 141  # 2026-11-29, torch 2.15.0: 141 of 164 (the additions by date: docs/OPINFO.md)


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


def native_packets():
    """The packet names the bridge routes to a registered op with a kernel: the op's own name
    (torch_bridge._registry), an ATen alias on its definition (torch_bridge._facts), or an ATen op
    whose bridge handler runs a registered op (torch_bridge._routed_to_registered: the batch norm
    forms over _native_batch_norm_legit_functional)."""
    registered = bridge._registry()
    routed = [n for n, op in bridge._routed_to_registered().items() if op in registered]
    return {n.partition(".")[0] for n in [*registered, *bridge._facts()[1], *routed]}


def test_the_list_is_the_installed_torchs_core_set():
    want, have = core_packets(), listed()
    added, gone = sorted(set(want) - set(have)), sorted(set(have) - set(want))
    assert not added and not gone, (
        f"torch {torch.__version__}'s Core ATen set differs from {LIST.name}: new {added}, gone {gone}; "
        f"rewrite it with `python3 {pathlib.Path(__file__).name} --write` and review the coverage")


def test_native_coverage_of_the_core_set(capsys):
    core = listed()
    native = native_packets()
    have = [n for n in core if n in native]
    missing = [n for n in core if n not in native]
    decomposable = [n for n in missing if any(
        getattr(getattr(torch.ops.aten, n), o) in torch._decomp.decomposition_table
        for o in getattr(torch.ops.aten, n).overloads())]
    with capsys.disabled():  # the test command's summary repeats the first line
        print(f"\nCore ATen: {len(have)} of {len(core)} packets native; of the other {len(missing)}, "
              f"{len(decomposable)} have a torch._decomp decomposition the bridge runs")
    print("  native:", " ".join(have))
    print("  by decomposition:", " ".join(decomposable))
    print("  neither:", " ".join(n for n in missing if n not in decomposable))
    assert len(have) >= NATIVE_AT_LEAST, f"{len(have)} native Core ATen packets, fewer than {NATIVE_AT_LEAST}"


if __name__ == "__main__" and "--write" in sys.argv:
    LIST.write_text(f"# torch {torch.__version__}: the ATen op packets with an overload tagged torch.Tag.core\n"
                    "# (tests/python/test_core_aten.py checks it against the installed torch).\n"
                    + "".join(n + "\n" for n in core_packets()))
