# The per-op facts that PyTorch meets (OpDef::aten, ops/registry.h, read through
# dtensor.ops.aten_facts()): every registered op reaches PyTorch, through the bridge and through
# torch.export's import (python/dtensor/_aten_ops.py), or its definition says why not. Checked
# against torch's own op schemas.
import pytest

torch = pytest.importorskip("torch")

import dtensor  # noqa: E402
from dtensor import _aten_ops, bridge  # noqa: E402

aten = torch.ops.aten


def _aten_overload(name):
    """torch.ops.aten's OpOverload for a registered name ('add' -> aten.add.default or the overload
    whose argument names begin with dtensor's), or None."""
    base, _, overload = name.partition(".")
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    return getattr(packet, overload or "default", None) if overload else packet


def test_every_op_and_alias_reaches_pytorch_or_says_why():
    # OpDef::aten (ops/registry.h) is the bridge's and the export import's one source of per-op
    # facts: every registered op's name must be an ATen op, or its definition says why not; every
    # alias must be an ATen overload with an adapter the bridge has; a local op must exist.
    facts = dtensor.ops.aten_facts()
    assert set(dtensor.ops.names(planned=True)) == set(facts)  # every op, the planned family's too
    assert {"opaque", "moe_dispatch", "convolution"} <= set(facts)
    problems = []
    for name, (layout_dependent, aliases, not_aten, _) in sorted(facts.items()):
        reachable = _aten_overload(name) is not None or bool(aliases)
        if not reachable and not not_aten:
            problems.append(f"{name}: no aten.{name}; set OpDef::aten.not_aten to why")
        if _aten_overload(name) is not None and not_aten:
            problems.append(f"{name}: aten.{name} exists but not_aten says '{not_aten}'")
        for alias, adapt, local_size, local in aliases:
            base, _, overload = alias.partition(".")
            if getattr(getattr(aten, base, None), overload or "default", None) is None:
                problems.append(f"{name}: alias aten.{alias} does not exist")
            if adapt and not adapt.startswith("keep:") and adapt not in bridge._ADAPTERS:
                problems.append(f"{name}: alias {alias}'s adapter '{adapt}' is not in torch_bridge._ADAPTERS")
            if local and bridge._aten_op(local) is None:
                problems.append(f"{name}: alias {alias}'s local op aten.{local} does not exist")
    assert not problems, "\n".join(problems)
    # The facts reach the bridge: squeeze and mean run dtensor's kernel, view's size is localized.
    assert {"mean", "squeeze", "embedding"} <= bridge._layout_dependent()
    assert bridge._facts()[1]["_unsafe_view"][0] == "view"



def _candidates(name, aliases):
    """ATen overloads a registered op may be reached by: those of its name (or its one overload)
    and its aliases."""
    base, _, overload = name.partition(".")
    packet = getattr(aten, base, None)
    out = []
    if packet is not None:
        out = [getattr(packet, o) for o in ([overload] if overload else packet.overloads())]
    for alias, *_ in aliases:
        b, _, o = alias.partition(".")
        out.append(getattr(getattr(aten, b), o or "default"))
    return out


# Registered ops that torch.export's import maps by code (_aten_ops._map) rather than by schema.
_MAPPED_BY_CODE = {
    "nll_loss": "ATen's reduction is an int, dtensor's a name",
    # The random ops take the seed and offset ATen's calls lack (the bridge's adapters add them);
    # an exported graph's native_dropout is planned as philox_dropout with seed 0 (_aten_ops._map),
    # its rand_like / randn_like / bernoulli as constants (_CREATE).
    "philox_dropout": "ATen's native_dropout has a train flag and no seed or offset",
    "philox_rand_like": "ATen's rand_like has no seed or offset",
    "philox_randn_like": "ATen's randn_like has no seed or offset",
    "philox_bernoulli": "ATen's bernoulli.p has a generator, not a seed and offset",
    # The random factories (ops/factory/) take the Philox key ATen's generator supplies implicitly;
    # an exported graph's factories have no tensor input, so the import makes them constants.
    "rand": "ATen's rand has no seed or offset",
    "randn": "ATen's randn has no seed or offset",
    "randperm": "ATen's randperm has no seed or offset",
}


def test_every_forward_op_binds_from_torch_export_by_schema():
    # _aten_ops binds an exported ATen call to the registered op of its name by argument name
    # (dtensor's schemas are ATen's, or a prefix of them): each forward op must fit one ATen
    # overload of its name or an alias, argument by argument with compatible types. Backward ops
    # appear in no exported forward graph.
    problems = []
    checked = 0
    for name, (_, aliases, not_aten, no_backward) in sorted(dtensor.ops.aten_facts().items()):
        if not_aten or no_backward.startswith("a backward op") or name in _MAPPED_BY_CODE:
            continue
        checked += 1
        why = []
        for c in _candidates(name, aliases):
            aten_name = c._schema.name.split("::", 1)[1]
            if _aten_ops.registered_op(aten_name, c._overloadname) != name:
                continue
            w = _aten_ops.schema_fit(name, c._schema)
            if not w:
                break
            why.append(w)
        else:
            problems.append(f"{name}: no ATen overload binds to it ({'; '.join(why) or 'none of its name'})")
    assert checked > 120
    assert not problems, "\n".join(problems)


def test_schema_fit_refuses_a_mismatched_argument():
    # The check above can fail: nll_loss's ATen reduction is an int where dtensor's is a name.
    assert "reduction" in _aten_ops.schema_fit("nll_loss", aten.nll_loss.default._schema)
    assert "other" in _aten_ops.schema_fit("add", aten.heaviside.default._schema)
    assert _aten_ops.schema_fit("heaviside", aten.heaviside.default._schema) == ""
