"""A planner report -> torch.distributed.tensor.parallel styles, and applying them to the model.

    report = dtensor.plan(model, (ids,), mesh="tp=4", example_kwargs={"labels": ids})
    plan = dtensor.parallelize_plan(report)                 # {"styles", "params", "inputs", ...}
    dtensor.apply_plan(model, plan, init_device_mesh("cpu", (4,), mesh_dim_names=("tp",)))
    with implicit_replication():                            # tensors the model makes itself
        model(input_ids=ids, labels=ids).loss.backward()

Mapping (docs/PYTHON.md "Applying a plan"): a module whose linear or embedding is its own single
call gets ColwiseParallel / RowwiseParallel when the planner's placements of its weight, bias and
input are that style's; its output_layouts are the placement the planner gives the output's
consumers; a module with replicated parameters whose ops are all sharded on one dim (a norm on a
sequence-sharded stream) gets SequenceParallel. Every other parameter the planner shards is listed
with explicit placements; the rest is replicated. Values flow between modules as DTensors
(use_local_output=False), so torch's sharding propagation keeps the model's own code (reshapes to
heads, rotary, residuals) correct whatever the boundary placements are.
"""
import re

__all__ = ["parallelize_plan", "apply_plan", "allreduce_data_parallel_grads"]

_PLACEMENT = re.compile(r"^(R|S\((-?\d+)\)|P\((sum|avg|max|min)\))$")


def _split(text, where):
    """'[R, S(0)]' -> ['R', 'S(0)']."""
    parts = [p.strip() for p in text.strip().strip("[]").split(",")]
    for p in parts:
        if not _PLACEMENT.match(p):
            raise ValueError(f"{where}: placement '{p}' in '{text}' is not one of R, S(dim), P(sum|avg|max|min)")
    return parts


def _axes(report):
    """(axis names, tp axis index, dp axis index or None) of the report's mesh; others are refused."""
    names = list(report["mesh"].get("names") or [])
    shape = list(report["mesh"]["shape"])
    if not names:
        names = ["tp"] if len(shape) == 1 else ["dp", "tp"][:len(shape)]
    if names == ["dp"]:
        raise ValueError(f"mesh dp={shape[0]}: a plan with no tp axis is plain data parallelism (torch's DDP or "
                         "FSDP applies it); parallelize_plan applies 'tp=N' and 'dp=M,tp=N'")
    other = [n for n in names if n not in ("tp", "dp")]
    if other or len(names) > 2 or (len(names) == 2 and set(names) != {"dp", "tp"}):
        raise ValueError(f"mesh {dict(zip(names, shape))}: parallelize_plan applies meshes 'tp=N' or 'dp=M,tp=N' "
                         f"(dp is data parallel of the batch); axes {other or names} are not supported")
    return names, names.index("tp"), (names.index("dp") if "dp" in names else None)


def parallelize_plan(report, json_form=False):
    """The planner's report (dtensor.plan) as what torch's parallelize_module applies.

    Returns {"tp": mesh dim name, "dp": name or None, "styles": {module FQN: ParallelStyle}
    (ColwiseParallel, RowwiseParallel, SequenceParallel),
    "params": {parameter FQN: [Placement]} (explicit placements on the tp mesh, for parameters no
    style covers), "inputs": {model input name: Placement} (the planner's tp placement of each
    forward input, passed by keyword), "notes": [str]}. json_form=True gives the same with styles as
    {"style": "ColwiseParallel", "input_layouts": "R", "output_layouts": "S(2)"} and placements as
    strings ("R", "S(1)", "P(sum)"), for json.dump; apply_plan takes either form.
    """
    if "import" not in report or "modules" not in report["import"]:
        raise ValueError("parallelize_plan needs a report from dtensor.plan (its 'import' lists the model's modules); "
                         "a `dtensor plan --graph` report lacks it")
    names, tp, dp = _axes(report)
    ops = {o["name"]: o for o in report["ops"]}
    notes, dp_sharded, reduced = [], [], []

    def tp_of(text, where):
        parts = _split(text, where)
        if len(parts) != len(report["mesh"]["shape"]):
            raise ValueError(f"{where}: placements {text} do not match mesh {report['mesh']}")
        if dp is not None and parts[dp] != "R" and where.startswith("parameter"):
            dp_sharded.append(where.split(" ", 1)[1])
        return parts[tp]

    params = {o["name"]: tp_of(o["placements"]["outputs"][0], f"parameter {o['name']}")
              for o in report["ops"] if o["op"] == "param"}
    inputs = {o["name"]: tp_of(o["placements"]["outputs"][0], f"input {o['name']}")
              for o in report["ops"] if o["op"] == "input"}
    styles, covered = {}, set()
    for path, m in sorted(report["import"]["modules"].items()):
        op = ops.get(m["op"])
        if op is None:
            continue
        ins = [tp_of(p, f"op {m['op']}") for p in op["placements"]["inputs"]]
        out = tp_of(op["placements"]["outputs"][0], f"op {m['op']}")
        w, b = params.get(m["weight"], "R"), params.get(m["bias"], "R") if m["bias"] else None
        x = ins[m["input"]]
        # What the planner hands the output's users: their input placement, when they agree.
        seen = {tp_of(ops[c]["placements"]["inputs"][i], f"op {c}") for c, i in m["consumers"]
                if c in ops and i < len(ops[c]["placements"]["inputs"])}
        after = seen.pop() if len(seen) == 1 else out
        style = None
        if w == "R" and b in (None, "R"):
            covered.update(filter(None, (m["weight"], m["bias"])))  # replicated: nothing to apply
            continue
        if m["kind"] == "linear" and w == "S(0)" and b in (None, "S(0)") and x == "R":
            style = "ColwiseParallel"  # output features split: x whole, y sharded on its last dim
        elif m["kind"] == "linear" and w == "S(1)" and b in (None, "R") and x.startswith("S("):
            style = "RowwiseParallel"  # input features split: x sharded on its last dim, y partial sums
        elif m["kind"] == "embedding" and w == "S(1)" and x == "R":
            style = "ColwiseParallel"  # embedding dim split
        elif m["kind"] == "embedding" and w == "S(0)" and x == "R":
            style = "RowwiseParallel"  # vocabulary split: masked lookups, partial sums
        if style is None:
            notes.append(f"module {path} ({m['kind']}): weight {w}, bias {b}, input {x} match no ParallelStyle "
                         "(Colwise: weight S(0), input R; Rowwise: weight S(1), input S(-1); embedding: weight "
                         "S(1) or S(0), ids R); its parameters get explicit placements")
            continue
        if after.startswith("P"):
            after = "R"  # a module boundary hands on a full value: Partial is reduced there
            reduced.append(path)
        styles[path] = {"style": style, "input_layouts": x, "output_layouts": after}
        covered.update(filter(None, (m["weight"], m["bias"])))
    # A module with only replicated parameters whose ops the planner runs all on one sharded dim
    # (a norm on a sequence-sharded residual stream) is SequenceParallel on that dim.
    owned, inside = {}, {}
    for o in report["ops"]:
        if o.get("kind") == "param":
            owned.setdefault(o["name"].rsplit(".", 1)[0], []).append(o["name"])
        elif o.get("kind") == "op" and "." in o["name"]:
            inside.setdefault(o["name"].rsplit(".", 1)[0], []).append(o)
    for path, names_ in sorted(owned.items()):
        if path in report["import"]["modules"] or any(params[n] != "R" for n in names_) or not inside.get(path):
            continue
        where = [tp_of(p, f"op {o['name']}") for o in inside[path] for p in o["placements"]["outputs"]]
        where += [x for o in inside[path] for x in (tp_of(p, f"op {o['name']}") for p in o["placements"]["inputs"])
                  if x != "R"]
        if len(set(where)) == 1 and where[0].startswith("S("):
            styles[path] = {"style": "SequenceParallel", "sequence_dim": int(where[0][2:-1])}
            covered.update(names_)
    if dp_sharded:
        notes.append(f"{len(dp_sharded)} parameters the planner shards over dp (ZeRO-style, e.g. {dp_sharded[0]}) "
                     "are applied Replicate on dp: sharding them over dp is FSDP's job")
    if reduced:
        notes.append(f"{len(reduced)} modules (e.g. {reduced[0]}) hand on a Partial output that the planner reduces "
                     "later; it is all-reduced at the module's boundary (output_layouts R)")
    explicit = {n: [p] for n, p in params.items() if n not in covered and p != "R"}
    for n, (p,) in explicit.items():
        if p.startswith("P"):
            raise ValueError(f"parameter {n}: the planner placed it {p}; a parameter must be R or S(dim)")
    plan = {"tp": names[tp], "dp": names[dp] if dp is not None else None,
            "styles": styles, "params": explicit, "inputs": inputs, "notes": notes}
    return plan if json_form else _to_torch(plan)


def _placement(text):
    from torch.distributed.tensor import Partial, Replicate, Shard

    if not isinstance(text, str):
        return text
    m = _PLACEMENT.match(text)
    if m is None:
        raise ValueError(f"placement '{text}' is not one of R, S(dim), P(sum|avg|max|min)")
    if text == "R":
        return Replicate()
    if m.group(2) is not None:
        return Shard(int(m.group(2)))
    return Partial(m.group(3))


def _style(spec):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    if not isinstance(spec, dict):
        return spec  # already a ParallelStyle
    if spec["style"] == "SequenceParallel":
        return SequenceParallel(sequence_dim=spec["sequence_dim"], use_local_output=False)
    cls = {"ColwiseParallel": ColwiseParallel, "RowwiseParallel": RowwiseParallel}.get(spec["style"])
    if cls is None:
        raise ValueError(f"style '{spec['style']}' is not one apply_plan makes (ColwiseParallel, RowwiseParallel, "
                         "SequenceParallel)")
    # DTensors between modules: the code between them runs with torch's sharding propagation.
    return cls(input_layouts=_placement(spec["input_layouts"]), output_layouts=_placement(spec["output_layouts"]),
               use_local_output=False)


def _to_torch(plan):
    out = dict(plan)
    out["styles"] = {k: _style(v) for k, v in plan["styles"].items()}
    out["params"] = {k: [_placement(p) for p in v] for k, v in plan["params"].items()}
    out["inputs"] = {k: _placement(v) for k, v in plan["inputs"].items()}
    return out


def apply_plan(model, plan, device_mesh):
    """Applies parallelize_plan's result (either form, or a dtensor.plan report) to `model` in place.

    device_mesh: a torch DeviceMesh; for a dp x tp plan, its dims are named as the plan's ("dp",
    "tp") and the styles go on device_mesh["tp"] (each dp group runs its own batch slice: see
    allreduce_data_parallel_grads). The styles are applied with parallelize_module; explicit
    parameters become nn.Parameter(distribute_tensor(...)); every other parameter and buffer is
    replicated over the tp mesh, so the model computes with DTensors only; each gradient arrives in
    its parameter's placements. The model's forward inputs are turned into DTensors with the
    planner's placements: pass them by keyword, full (the same on every tp rank). Run forward and
    backward inside
    torch.distributed.tensor.experimental.implicit_replication(): positions and masks the model
    creates itself are the same on every rank. Returns the model.
    """
    import torch
    from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
    from torch.distributed.tensor.parallel import PrepareModuleInput, parallelize_module

    if "ops" in plan:
        plan = parallelize_plan(plan)
    plan = _to_torch(plan)
    mesh = device_mesh
    if plan["dp"] is not None or (mesh.ndim > 1):
        dims = mesh.mesh_dim_names or ()
        if plan["tp"] not in dims:
            raise ValueError(f"apply_plan: the plan's tp axis '{plan['tp']}' is not a dim of the mesh (dims {dims}); "
                             "name the mesh dims as the plan's mesh, e.g. mesh_dim_names=('dp', 'tp')")
        mesh = mesh[plan["tp"]]

    modules = dict(model.named_modules())
    owners, owner_fqns = {}, {}  # id(parameter) -> [(module, name)], [FQN]: tied weights move together
    for mname, mod in modules.items():
        for pname, p in mod.named_parameters(recurse=False):
            owners.setdefault(id(p), []).append((mod, pname))
            owner_fqns.setdefault(id(p), []).append(f"{mname}.{pname}" if mname else pname)
    fqns = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    missing = [k for k in plan["styles"] if k not in modules] + [k for k in plan["params"] if k not in fqns]
    if missing:
        raise ValueError(f"apply_plan: the plan names {missing}, which {type(model).__name__} does not have "
                         "(was it planned from another model?)")
    for path, style in plan["styles"].items():
        kind = type(modules[path])
        if kind not in (torch.nn.Linear, torch.nn.Embedding) and type(style).__name__ != "SequenceParallel":
            raise ValueError(f"apply_plan: module {path} is a {kind.__name__}; Colwise/RowwiseParallel accept "
                             "nn.Linear and nn.Embedding")

    before = {(id(mod), pname): id(p) for mod in modules.values() for pname, p in mod.named_parameters(recurse=False)}
    parallelize_module(model, mesh, plan["styles"])
    # A style replaces its module's parameters; weights tied to them (lm_head = embedding) follow.
    replaced = {}
    for mod in modules.values():
        for pname, p in mod.named_parameters(recurse=False):
            old = before.get((id(mod), pname))
            if old is not None and old != id(p):
                replaced[old] = p
    for old, new in replaced.items():
        for mod, pname in owners.get(old, []):
            if getattr(mod, pname) is not new:
                mod.register_parameter(pname, new)

    for mname, mod in modules.items():
        for pname, p in list(mod.named_parameters(recurse=False)):
            if isinstance(p, DTensor):
                continue
            placements = next((plan["params"][n] for n in owner_fqns[id(p)] if n in plan["params"]), [Replicate()])
            new = torch.nn.Parameter(distribute_tensor(p.detach(), mesh, placements), requires_grad=p.requires_grad)
            for owner, name in owners[id(p)]:
                owner.register_parameter(name, new)
        for bname, b in list(mod.named_buffers(recurse=False)):
            if b is not None and not isinstance(b, DTensor):
                persistent = bname not in mod._non_persistent_buffers_set
                mod.register_buffer(bname, distribute_tensor(b, mesh, [Replicate()]), persistent=persistent)

    # Autograd may hand a parameter a Partial gradient (a replicated norm weight used on sharded
    # activations) or one sharded otherwise; it is brought to the parameter's own placements, so a
    # gradient's local block is this rank's part of the gradient (what allreduce_data_parallel_grads,
    # clipping and optimizer state expect) and the optimizer step needs no collective.
    for p in {id(p): p for p in model.parameters()}.values():
        if isinstance(p, DTensor) and p.requires_grad:
            p.register_hook(lambda g, p=p: g if g.placements == p.placements else g.redistribute(
                g.device_mesh, p.placements))

    if plan["inputs"]:
        layouts = {k: Replicate() for k in plan["inputs"]}
        parallelize_module(model, mesh, PrepareModuleInput(input_kwarg_layouts=layouts,
                                                           desired_input_kwarg_layouts=dict(plan["inputs"])))
    return model


def allreduce_data_parallel_grads(model, device_mesh, dim="dp"):
    """Sums every parameter's gradient over the mesh dim `dim` (data parallel: each dp group ran its
    own slice of the batch on the tp sub-mesh). With a loss summed over the whole batch (Hugging
    Face: num_items_in_batch = the global token count) the result is the full batch's gradient."""
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    group = device_mesh.get_group(dim)
    for p in model.parameters():
        if p.grad is not None:
            local = p.grad.to_local() if isinstance(p.grad, DTensor) else p.grad
            dist.all_reduce(local, group=group)
