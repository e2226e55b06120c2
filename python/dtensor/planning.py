"""Plan the user's own PyTorch model: torch.export's ATen graph -> the planner's JSON graph format.

    report = dtensor.plan(model, (input_ids,), mesh="dp=2,tp=4", hardware="h100-nvlink")
    info = dtensor.export_graph(model, (input_ids,), "model.json")   # then: dtensor plan --graph

The model may live on the `meta` device: export only needs shapes, so a Llama-3-8B-size config
costs no memory. What the walk does with each ATen op (tables and _map in _aten_ops.py):
- mapped onto a planner op (the registry's ATen-named ops: linear, mm, sdpa, layer_norm, pooling,
  ..., and the planner's convolution and batch_norm); in-place ops (relu_, add_) as their
  out-of-place forms. Each mapped node carries its traced output shapes ("shapes"), which the
  planner checks against the ones it computes from the arguments;
- skipped as bookkeeping (getitem, detach, alias, clone, _assert_*, sym_size): the value passes
  through (dropout too: a plan does not change with it; its elementwise cost is left out);
- folded into a constant when no graph input or parameter reaches it (arange, masks, rotary
  tables): the planner materializes constants in any layout for free;
- otherwise "unknown": kept as the planner's `opaque` op with the traced output shape, which has no
  sharding rule, so it is planned replicated (inputs gathered to every rank) and priced as a copy
  (reads its inputs, writes its output, 0 FLOPs). Unknown ops are listed in the report.
"""
import json
import os
import re
import tempfile
import time

from ._aten_ops import (_CREATE, _DTYPES, _FIRST_OF, _PASS, _SKIP, _VALUES_OF, FLOP_OPS, _aten_name, _flatten,
                        _functional, _map, _matmul_flops)

__all__ = ["export_graph", "plan", "graph_from_exported", "module_ops", "GraphImportError", "FLOP_OPS"]

class GraphImportError(ValueError):
    """An exported graph the importer cannot describe (symbolic shapes, a non-tensor output...)."""


def _module_path(node):
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    return list(stack.values())[-1][0]


# Built-in leaf modules: several of them side by side (Sequential(Linear, GELU, Linear)) are not
# repeated blocks.
_LEAF_MODULES = re.compile(r"^torch\.nn\.modules\.(linear|activation|conv|normalization|sparse|dropout|"
                           r"pooling|batchnorm|flatten|padding|pixelshuffle|upsampling)\.")


def _index_stem(part):
    """'' for an index ('3'), the stem of a numbered name ('encoder_layer' for 'encoder_layer_3',
    as torchvision's ViT names its blocks), None for other module names."""
    if part.isdigit():
        return ""
    stem, _, k = part.rpartition("_")
    return stem if stem and k.isdigit() else None


class _Layers:
    """Repeated blocks from the module tree: a module at `container.K` (K an index, or a numbered
    name stem_K) is a layer when `container` holds at least two such modules of its class and stem
    (model.layers.0..31, h.0..11, encoder.layers.encoder_layer_0..11). Layers get one global index
    each, in order of first appearance, so stacks that both count from 0 (encoder.layers,
    decoder.layers) stay apart."""

    def __init__(self, ep):
        self.cls = {}
        for node in ep.graph.nodes:
            for path, cls in (node.meta.get("nn_module_stack") or {}).values():
                self.cls[path] = str(cls)
        count = {}
        for path, cls in self.cls.items():
            container, _, last = path.rpartition(".")
            stem = _index_stem(last)
            if stem is not None and not _LEAF_MODULES.match(cls):
                count[(container, stem, cls)] = count.get((container, stem, cls), 0) + 1
        self.repeated = {k for k, n in count.items() if n >= 2}
        self.index = {}

    def block_of(self, path):
        """The path of the layer a module or parameter path lies in ('model.layers.3'), else ''."""
        parts = path.split(".")
        for i, part in enumerate(parts):
            stem = _index_stem(part)
            if stem is not None:
                block = ".".join(parts[:i + 1])
                if (".".join(parts[:i]), stem, self.cls.get(block)) in self.repeated:
                    return block
                if stem == "":
                    return ""  # only the outermost index can name a layer
        return ""

    def of(self, path):
        """The layer index of a module or parameter path, -1 outside repeated blocks."""
        block = self.block_of(path)
        if not block:
            return -1
        return self.index.setdefault(block, len(self.index))


class _Walker:
    def __init__(self, ep):
        import torch

        self.torch = torch
        self.ep = ep
        self.nodes = []          # JSON nodes
        self.ref = {}            # fx node -> tensor name (or tuple of names / None for skipped)
        self.const = set()       # names of constant nodes (buffers, folded values)
        self.names = set()
        self.unknown = {}        # aten name -> count
        self.skipped = {}        # aten name -> count
        self.mapped = {}
        self.flops = 0
        self.num_params = 0
        self.tied = {}           # id of a parameter tensor -> its node's name
        self.params = set()      # names of parameter nodes
        self.path_of = {}        # op node name -> module path (for roles)
        self.seen_layer = False
        self.layers = _Layers(ep)

    # -- helpers ----------------------------------------------------------------------------------
    def _unique(self, name):
        base, i = name, 1
        while name in self.names:
            i += 1
            name = f"{base}_{i}"
        self.names.add(name)
        return name

    def _meta(self, node):
        val = node.meta.get("val")
        if val is None:
            val = node.meta.get("example_value")
        return val

    def _tensor_meta(self, val, where):
        shape = []
        for s in val.shape:
            if not isinstance(s, int):  # a SymInt: int() would pin it to the example's value silently
                raise GraphImportError(f"{where}: symbolic size {s} in shape {tuple(val.shape)} (dynamic_shapes "
                                       "or a size that depends on the data); the planner needs static shapes")
            shape.append(s)
        dtype = _DTYPES.get(str(val.dtype))
        if dtype is None:
            raise GraphImportError(f"{where}: dtype {val.dtype} is not one the planner knows; accepted: "
                                   + ", ".join(sorted(_DTYPES)))
        return shape, dtype

    def _place(self, node):
        path = _module_path(node)
        layer = self.layers.of(path)
        if layer >= 0:
            self.seen_layer = True
            block = "layer"
        else:
            block = "head" if self.seen_layer else "embed"
        return path, layer, block

    def _leaf(self, kind, name, val, where, layer=-1):
        shape, dtype = self._tensor_meta(val, where)
        name = self._unique(name)
        j = {"name": name, "kind": kind, "shape": shape, "dtype": dtype}
        if layer >= 0:
            j["layer"] = layer
        self.nodes.append(j)
        return name

    def _is_tensor(self, a):
        return isinstance(a, self.torch.fx.Node)

    # -- the walk ---------------------------------------------------------------------------------
    def run(self):
        sig = self.ep.graph_signature
        kinds = {}
        for spec in sig.input_specs:
            kinds[spec.arg.name] = (spec.kind.name, spec.target)
        for node in self.ep.graph.nodes:
            if node.op == "placeholder":
                self._placeholder(node, kinds.get(node.name, ("USER_INPUT", None)))
            elif node.op == "call_function":
                self._call(node)
            elif node.op in ("output", "get_attr"):
                pass  # get_attr: the submodules of higher-order ops (_inline); lifted tensors are placeholders
            else:
                raise GraphImportError(f"node '{node.name}': unsupported FX op '{node.op}' (expected placeholder, "
                                       "call_function, output: pass an ExportedProgram from torch.export.export)")

    def _placeholder(self, node, kind_target):
        kind, target = kind_target
        val = self._meta(node)
        if not isinstance(val, self.torch.Tensor):
            self.ref[node] = None  # a non-tensor user input (int, flag): its value is baked into the graph
            return
        where = f"input '{node.name}'"
        if kind == "PARAMETER":
            path = target or node.name
            tensor = self.ep.state_dict.get(target)
            if tensor is not None and id(tensor) in self.tied:
                self.ref[node] = self.tied[id(tensor)]  # a tied weight (lm_head = wte): one parameter
                return
            self.ref[node] = self._leaf("param", path, val, where, self.layers.of(path))
            self.params.add(self.ref[node])
            self.num_params += val.numel()
            if tensor is not None:
                self.tied[id(tensor)] = self.ref[node]
        elif kind in ("BUFFER", "CONSTANT_TENSOR"):
            self.ref[node] = self._leaf("constant", target or node.name, val, where, self.layers.of(target or ""))
            self.const.add(self.ref[node])
        elif kind == "USER_INPUT":
            self.ref[node] = self._leaf("input", node.name, val, where)
        else:
            raise GraphImportError(f"{where}: input kind {kind} is not supported (parameters, buffers, constants and "
                                   "user inputs are)")

    def _arg(self, a, where):
        """A JSON argument: a tensor name, a list of them, or a plain value."""
        if self._is_tensor(a):
            r = self.ref.get(a)
            if r is None or isinstance(r, tuple):
                raise GraphImportError(f"{where}: argument '{a.name}' has no single tensor value")
            return r
        if isinstance(a, (list, tuple)):
            return [self._arg(e, where) for e in a]
        if isinstance(a, (bool, int, float, str)) or a is None:
            return a
        return str(a)

    def _call(self, node):
        torch = self.torch
        target = node.target
        if target is _getitem():
            src, i = node.args
            r = self.ref.get(src)
            self.ref[node] = r[i] if isinstance(r, tuple) else None
            return
        if isinstance(target, torch._ops.HigherOrderOperator):
            self._inline(node)
            return
        aten = _aten_name(target)  # as the report lists it when unknown (relu_)
        name = _functional(aten, target)
        val = self._meta(node)
        tensors = [a for a in _flatten((node.args, node.kwargs)) if self._is_tensor(a)]
        live = [a for a in tensors if isinstance(self.ref.get(a), str) and self.ref[a] not in self.const]
        if name in FLOP_OPS:
            transposed = name in ("convolution", "_convolution") and bool(node.args[6])
            self.flops += _matmul_flops(name, [tuple(self._meta(a).shape) for a in tensors[:3]],
                                        tuple(val.shape), transposed)
        where = f"node '{node.name}' ({aten})"
        if name in _SKIP or val is None:
            self.skipped[name] = self.skipped.get(name, 0) + 1
            self.ref[node] = None
            return
        multi = isinstance(val, (tuple, list))
        if not live or name in _CREATE:
            # Nothing computed from the data or the parameters reaches it: a constant.
            if multi:
                self.ref[node] = tuple(
                    self._leaf("constant", f"{node.name}_{i}", v, where) if isinstance(v, torch.Tensor) else None
                    for i, v in enumerate(val))
            else:
                self.ref[node] = self._leaf("constant", node.name, val, where)
            self.const.update(r for r in _flatten(self.ref[node]) if r is not None)
            return
        if name in _PASS and len(tensors) >= 1 and not multi:
            src = node.args[0]
            dt_in = self._meta(src).dtype if self._is_tensor(src) else None
            if dt_in is not None and dt_in != val.dtype and name in ("_to_copy", "to", "type_as"):
                self._emit(node, "to", [self._arg(src, where), self._tensor_meta(val, where)[1]], {}, val, where)
            else:
                self.skipped[name] = self.skipped.get(name, 0) + 1
                self.ref[node] = self.ref.get(src)
            return
        mapped = _map(name, node, val, self, where)
        if mapped is None:
            self._opaque(node, aten, live, val, where)
            return
        op, args, kwargs = mapped
        if name in _FIRST_OF:  # (out, statistics...): only out is planned
            self._emit(node, op, args, kwargs, val[0], where)
            self.ref[node] = (self.ref[node],) + (None,) * (len(val) - 1)
            return
        if name in _VALUES_OF:  # the planner's op also returns the indices
            self._emit(node, op, args, kwargs, (val, None), where)
            self.ref[node] = self.ref[node][0]
            return
        self._emit(node, op, args, kwargs, val, where)

    def _inline(self, node):
        """Walks the body of a higher-order op that only changes modes (wrap_with_set_grad_enabled,
        wrap_with_autocast: torch.export keeps `with torch.no_grad():` regions as these) in place: its
        placeholders are the op's arguments after the submodule, its outputs the op's results."""
        name = getattr(node.target, "__name__", str(node.target))
        if name not in ("wrap_with_set_grad_enabled", "wrap_with_autocast"):
            raise GraphImportError(f"node '{node.name}': higher-order op {name} is not supported (accepted: "
                                   "wrap_with_set_grad_enabled, wrap_with_autocast); export without it")
        at = next(i for i, a in enumerate(node.args) if self._is_tensor(a) and a.op == "get_attr")
        body = getattr(self.ep.graph_module, node.args[at].target)
        inputs = iter(node.args[at + 1:])
        for n in body.graph.nodes:
            if n.op == "placeholder":
                self.ref[n] = self.ref.get(next(inputs))
            elif n.op == "call_function":
                self._call(n)
            elif n.op == "output":
                outs = n.args[0]
                self.ref[node] = tuple(self.ref.get(o) if self._is_tensor(o) else None
                                       for o in (outs if isinstance(outs, (tuple, list)) else [outs]))

    def _role(self, op, path, args):
        """Megatron's role of a linear in a repeated layer, for the planner's Megatron baseline: "column"
        when its input comes from outside its parent module (q/k/v, gate/up: fed by a norm), "row"
        when the parent module computed it (o_proj after attention, down after the activation).
        Only for linears in a submodule of the layer (model.layers.3.mlp.up_proj), where the parent
        module is one Megatron block."""
        if op != "linear" or args[1] not in self.params or "." not in path:
            return ""
        parent = path.rsplit(".", 1)[0]
        if not self.layers.block_of(parent) or self.layers.block_of(parent) == parent:
            return ""
        src = self.path_of.get(args[0], "")
        return "row" if src == parent or src.startswith(parent + ".") else "column"

    def _emit(self, node, op, args, kwargs, val, where):
        path, layer, block = self._place(node)
        name = self._unique(f"{path}.{node.name}" if path else node.name)
        outs = val if isinstance(val, (tuple, list)) else [val]
        # The traced shapes: the planner checks its own against them (planner/graph_json.h).
        shapes = [self._tensor_meta(v, where)[0] if isinstance(v, self.torch.Tensor) else None for v in outs]
        j = {"name": name, "op": op, "args": args, "kwargs": kwargs, "block": block, "shapes": shapes}
        if layer >= 0:
            j["layer"] = layer
            role = self._role(op, path, args)
            if role:
                j["role"] = role
        self.nodes.append(j)
        self.path_of[name] = path
        self.mapped[op] = self.mapped.get(op, 0) + 1
        if isinstance(val, (tuple, list)):
            self.ref[node] = tuple(f"{name}:{i}" for i in range(len(val)))
        else:
            self.ref[node] = name

    def _opaque(self, node, name, live, val, where):
        self.unknown[name] = self.unknown.get(name, 0) + 1
        inputs = [self._arg(a, where) for a in dict.fromkeys(live)]
        outs = val if isinstance(val, (tuple, list)) else [val]
        names = []
        for i, v in enumerate(outs):
            if not isinstance(v, self.torch.Tensor):
                names.append(None)
                continue
            shape, dtype = self._tensor_meta(v, where)
            path, layer, block = self._place(node)
            base = f"{path}.{node.name}" if path else node.name
            n = self._unique(base if len(outs) == 1 else f"{base}_{i}")
            j = {"name": n, "op": "opaque", "args": [inputs, shape, dtype, name], "kwargs": {}, "block": block}
            if layer >= 0:
                j["layer"] = layer
            self.nodes.append(j)
            self.path_of[n] = path
            names.append(n)
        self.ref[node] = tuple(names) if isinstance(val, (tuple, list)) else names[0]


def _getitem():
    import operator
    return operator.getitem


def graph_from_exported(ep, name="model", training=True, optimizer="adamw"):
    """The planner's JSON graph (a dict, format dtensor-graph/1) of an ExportedProgram, and a summary:
    {"parameters", "forward_flops", "unknown_ops", "skipped_ops", "mapped_ops", "nodes"}."""
    w = _Walker(ep)
    w.run()
    graph = {"format": "dtensor-graph/1", "name": name,
             "description": f"imported from torch.export ({len(w.nodes)} nodes)",
             "training": bool(training), "optimizer": optimizer, "nodes": w.nodes}
    summary = {"parameters": int(w.num_params), "forward_flops": int(w.flops),
               "unknown_ops": dict(sorted(w.unknown.items())), "skipped_ops": dict(sorted(w.skipped.items())),
               "mapped_ops": dict(sorted(w.mapped.items())), "nodes": len(w.nodes)}
    return graph, summary


def module_ops(graph):
    """The linears and embeddings that are one module's own call, for dtensor.parallelize_plan:
    {module path: {"kind": "linear"|"embedding", "op", "weight", "bias", "input", "consumers"}} where
    "input" is the data argument's index among the op's tensor arguments and "consumers" lists
    [op name, tensor argument index] for each use of the output. A module is listed only when its
    weight is the parameter `<path>.weight` and the op lies in the module (so a tied lm_head, whose
    weight is the embedding's, is not) and it is called once."""
    nodes = graph["nodes"]
    names = {n["name"] for n in nodes}
    params = {n["name"] for n in nodes if n.get("kind") == "param"}

    def tensors(node):
        return [a for a in _flatten(node.get("args", [])) if isinstance(a, str) and a.split(":")[0] in names]

    consumers, found, calls = {}, {}, {}
    for n in nodes:
        if "op" not in n:
            continue
        for i, a in enumerate(tensors(n)):
            consumers.setdefault(a, []).append([n["name"], i])
        if n["op"] not in ("linear", "embedding"):
            continue
        args = n["args"]
        weight = args[1] if n["op"] == "linear" else args[0]
        if weight not in params or not weight.endswith(".weight"):
            continue
        path = weight[:-len(".weight")]
        if not n["name"].startswith(path + "."):
            continue
        calls[path] = calls.get(path, 0) + 1
        bias = args[2] if n["op"] == "linear" and len(args) > 2 and args[2] in params else None
        found[path] = {"kind": n["op"], "op": n["name"], "weight": weight, "bias": bias,
                       "input": 0 if n["op"] == "linear" else 1}
    for path, m in found.items():
        m["consumers"] = consumers.get(m["op"], [])
    return {p: m for p, m in found.items() if calls[p] == 1}


def _no_cache_kwargs(model, example_kwargs):
    """transformers models with `config.use_cache` (their default) return a KV cache object that
    torch.export cannot output; a training step keeps no cache, so they are exported with
    use_cache=False unless the caller set it. Returns the kwargs and what was added."""
    kwargs = dict(example_kwargs or {})
    if getattr(getattr(model, "config", None), "use_cache", False) and "use_cache" not in kwargs:
        kwargs["use_cache"] = False
        return kwargs, {"use_cache": False}
    return kwargs, {}


def _export(model, example_args, example_kwargs):
    import torch

    if not isinstance(example_args, tuple):
        example_args = (example_args,)
    try:
        return torch.export.export(model, example_args, example_kwargs)
    except Exception as e:  # torch's message says which line of the model it could not trace
        raise GraphImportError(f"torch.export.export could not trace {type(model).__name__}: {e}") from e


def export_graph(model, example_args, path, example_kwargs=None, training=True, optimizer="adamw", name=None):
    """Traces `model` on `example_args` with torch.export and writes the planner's JSON graph to `path`
    (`dtensor plan --graph PATH --mesh ...` reads it). Returns the summary of graph_from_exported plus
    "export_s" (tracing and walking time, seconds) and, for a transformers model whose config keeps
    a KV cache (the default), "export_kwargs_added": {"use_cache": False} (it is traced without it)."""
    t0 = time.perf_counter()
    kwargs, added = _no_cache_kwargs(model, example_kwargs)
    ep = _export(model, example_args, kwargs)
    graph, summary = graph_from_exported(ep, name or type(model).__name__, training, optimizer)
    summary["export_s"] = time.perf_counter() - t0
    if added:
        summary["export_kwargs_added"] = added
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(graph, f)
    os.replace(tmp, path)  # a reader never sees half a file
    return summary


def plan(model, example_args, mesh="dp=2,tp=4", hardware="h100-nvlink", example_kwargs=None, training=True,
         optimizer="adamw", memory_limit_gb=0.0, compare=True, graph_path=None, baseline_ops=False):
    """Plans `model` (an nn.Module, on any device including `meta`) for `mesh` on `hardware`.

    Returns the planner's report as a dict (the JSON of `dtensor plan --format json`: per-op
    placements and collectives, totals, baselines) with "import" added: the graph summary
    (parameters, forward_flops, unknown_ops planned replicated, skipped_ops, export_s) and
    "search_s", the planner's wall time ("search_cpu_s": its CPU time, all threads). graph_path keeps the graph file (else a temporary one).
    Each baseline has "layers" (collectives per layer, as the plan's); baseline_ops adds its "ops"
    (placements and collectives per op) to compare a plan with Megatron's op by op.
    Raises GraphImportError when the model cannot be traced or described, DTensorError naming the
    node when the planner rejects the graph."""
    from . import _dtensor

    with tempfile.TemporaryDirectory(prefix="dtensor-plan-") as d:
        path = graph_path or os.path.join(d, "graph.json")
        summary = export_graph(model, example_args, path, example_kwargs, training, optimizer)
        with open(path) as f:
            summary["modules"] = module_ops(json.load(f))
        t0, c0 = time.perf_counter(), time.process_time()
        text = _dtensor._plan_graph_file(path, mesh, hardware, float(memory_limit_gb), bool(compare),
                                     bool(baseline_ops))
        summary["search_s"] = time.perf_counter() - t0
        summary["search_cpu_s"] = time.process_time() - c0  # every thread's CPU time: the load-free cost
    report = json.loads(text)
    report["import"] = summary
    if summary.get("export_kwargs_added"):
        report.setdefault("notes", []).append(
            "traced with use_cache=False: a training step keeps no KV cache (the model's config has use_cache=True)")
    if summary["unknown_ops"]:
        report.setdefault("notes", []).append(
            "ops without a planner rule, planned replicated and priced as copies: "
            + ", ".join(f"{k} x{v}" for k, v in summary["unknown_ops"].items()))
    return report
