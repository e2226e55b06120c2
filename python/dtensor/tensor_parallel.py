"""dtensor.bridge.parallelize_module: PyTorch's tensor-parallel API over bridge tensors.

    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    bridge.parallelize_module(model, mesh, {"transformer.h.*.attn.c_attn": ColwiseParallel(),
                                            "transformer.h.*.attn.c_proj": RowwiseParallel()})

The plan maps module paths (fnmatch patterns, as torch's) to torch's own ParallelStyle objects
(ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput, PrepareModuleOutput),
read by their attributes. Semantics follow torch.distributed.tensor.parallel, with these
differences, all because bridge tensors keep global shapes:
- outputs stay bridge tensors (`use_local_output` is not applied): model code sees the global
  shapes (heads, features), so a model needs no per-rank config change;
- every parameter the plan does not shard becomes a replicated bridge parameter (autograd
  accumulates bridge gradients into bridge parameters only); tied parameters stay tied;
- transformers' Conv1D (weight [in, out], GPT-2) is sharded like nn.Linear with the weight's dims
  swapped (torch refuses it).
The mesh is 1-d (the tensor-parallel dim; `mesh["tp"]` of a bigger mesh, as torch's) or n-d with
a dim named "tp": the plan applies on that dim, parameters are replicated on the others, and an
input keeps its placements there (data parallel: ids sharded Shard(0) on "dp"; the gradients come
back Partial over "dp" and are reduced into the replicated parameters by the engine).
"""
import fnmatch

import torch
import torch.nn as nn

from ._dtensor import DTensorError, Replicate, Shard


def _styles():
    from torch.distributed.tensor import parallel as tp
    return tp


def _placement(p, ndim):
    """A torch placement as dtensor's (Shard's negative dim against a tensor of `ndim` dims)."""
    name = type(p).__name__
    if name == "Placement":  # dtensor's own
        if p.is_shard():
            return Shard(p.dim % ndim if ndim else 0)
        if p.is_replicate():
            return p
        raise DTensorError(f"parallelize_module: placement {p} is not supported here; accepted: Shard, Replicate")
    if name == "Shard":
        return Shard(p.dim % ndim if ndim else 0)
    if name == "Replicate":
        return Replicate()
    raise DTensorError(f"parallelize_module: placement {p} is not supported here; accepted: Shard, Replicate")


def _is_conv1d(m):
    return type(m).__name__ == "Conv1D" and hasattr(m, "nf")  # transformers.pytorch_utils.Conv1D


def _param_placements(module, style_kind):
    """{parameter name: dtensor placement} of a column- or row-parallel module."""
    col = style_kind == "col"
    if isinstance(module, nn.Linear):
        return {"weight": Shard(0) if col else Shard(1), "bias": Shard(0) if col else Replicate()}
    if _is_conv1d(module):
        return {"weight": Shard(1) if col else Shard(0), "bias": Shard(0) if col else Replicate()}
    if isinstance(module, nn.Embedding):
        return {"weight": Shard(1) if col else Shard(0)}
    raise DTensorError(f"parallelize_module: {'Colwise' if col else 'Rowwise'}Parallel on "
                       f"{type(module).__name__}; accepted: nn.Linear, nn.Embedding, transformers' Conv1D")


def named_mesh_dim(mesh, name, fn, one_d):
    """The index of `mesh`'s dim called `name` (0 for a 1-d mesh, whatever its name); raises
    DTensorError naming `fn` and what is accepted ("a 1-d <one_d> or a mesh with a dim named ...")."""
    shape = list(mesh.shape() if callable(mesh.shape) else mesh.shape)
    names = list(mesh.mesh_dim_names or [])
    if len(shape) == 1:
        return 0
    if name in names:
        return names.index(name)
    raise DTensorError(f"{fn}: a {len(shape)}-d mesh {shape} with dims {names or 'unnamed'}; accepted: a 1-d "
                       f"{one_d} or a mesh with a dim named '{name}'")


class _Parallelizer:
    def __init__(self, mesh, tp_dim):
        from . import torch_bridge as bridge
        self.bridge = bridge
        self.mesh = mesh
        self.tp = tp_dim
        self.ndim = mesh.ndim
        self.done = {}  # id(original parameter) -> bridge parameter (tied parameters stay tied)

    def on_tp(self, placement, others=None):
        """Placements with `placement` on the tensor-parallel dim, `others` (default Replicate) elsewhere."""
        out = list(others) if others is not None else [Replicate()] * self.ndim
        out[self.tp] = placement
        return out

    def param(self, p, placement):
        key = id(p)
        if key not in self.done:
            if isinstance(p, self.bridge.DTensor):
                self.done[key] = p
            else:
                d = self.bridge.distribute(p.detach(), self.mesh, self.on_tp(placement))
                self.done[key] = self.bridge.keep_grad_layout(nn.Parameter(d, requires_grad=p.requires_grad))
        return self.done[key]

    def to_layout(self, x, layout, given):
        """An input or output moved to `layout` on the tensor-parallel dim: a plain tensor is first
        taken as laid out as `given` there (torch's DTensor.from_local: Replicate means the whole
        tensor on every rank) and replicated on the other dims."""
        b = self.bridge
        if not isinstance(x, torch.Tensor) or layout is None:
            return x
        if not isinstance(x, b.DTensor):
            g = _placement(given, x.dim()) if given is not None else Replicate()
            x = (b.distribute(x, self.mesh, self.on_tp(g)) if g == Replicate()
                 else b.from_local(x, self.mesh, self.on_tp(g)))
        want = self.on_tp(_placement(layout, x.dim()), x.placements)
        return x if list(x.placements) == want else x.redistribute(placements=want)

    def inputs(self, module, given, desired, kw_given=None, kw_desired=None):
        def hook(mod, args, kwargs):
            args = tuple(self.to_layout(a, d, g) for a, g, d in
                         zip(args, list(given) + [None] * len(args), list(desired) + [None] * len(args)))
            for k, d in (kw_desired or {}).items():
                if k in kwargs:
                    kwargs[k] = self.to_layout(kwargs[k], d, (kw_given or {}).get(k))
            return args, kwargs
        module.register_forward_pre_hook(hook, with_kwargs=True)

    def outputs(self, module, layouts):
        def hook(mod, args, out):
            if isinstance(out, torch.Tensor):
                return self.to_layout(out, layouts[0], None)
            if isinstance(out, (tuple, list)):
                return type(out)(self.to_layout(o, l, None) for o, l in zip(out, list(layouts) + [None] * len(out)))
            return out
        module.register_forward_hook(hook)

    def apply(self, module, style):
        tp = _styles()
        if isinstance(style, (tp.ColwiseParallel, tp.RowwiseParallel)):
            kind = "col" if isinstance(style, tp.ColwiseParallel) else "row"
            for name, placement in _param_placements(module, kind).items():
                p = getattr(module, name, None)
                if p is not None:
                    setattr(module, name, self.param(p, placement))
            desired = style.desired_input_layouts if kind == "col" else (Shard(-1),)
            if kind == "row" and isinstance(module, nn.Embedding):
                desired = (Replicate(),)
            self.inputs(module, style.input_layouts, desired)
            self.outputs(module, style.output_layouts)
        elif isinstance(style, tp.SequenceParallel):
            # Norms and dropout on a sequence-sharded activation: parameters replicated.
            for name, p in list(module.named_parameters(recurse=False)):
                setattr(module, name, self.param(p, Replicate()))
            self.inputs(module, style.sequence_sharding, style.sequence_sharding)
            self.outputs(module, style.sequence_sharding)
        elif isinstance(style, tp.PrepareModuleInput):
            self.inputs(module, style.input_layouts or (), style.desired_input_layouts or (),
                        style.input_kwarg_layouts, style.desired_input_kwarg_layouts)
        elif isinstance(style, tp.PrepareModuleOutput):
            self.outputs(module, style.desired_output_layouts)
        else:
            raise DTensorError(f"parallelize_module: style {type(style).__name__} is not supported; accepted: "
                               f"ColwiseParallel, RowwiseParallel, SequenceParallel, PrepareModuleInput, "
                               f"PrepareModuleOutput (torch.distributed.tensor.parallel)")

    def replicate_rest(self, root):
        for _, mod in root.named_modules(remove_duplicate=False):
            for name, p in list(mod.named_parameters(recurse=False)):
                setattr(mod, name, self.param(p, Replicate()))


def parallelize_module(module, device_mesh, parallelize_plan=None):
    """torch.distributed.tensor.parallel.parallelize_module for bridge tensors: `parallelize_plan`
    is a ParallelStyle (applied to `module`) or {module path pattern: ParallelStyle}; patterns are
    matched with fnmatch against `module.named_modules()` paths (a pattern matching nothing raises).
    Returns `module`, its parameters bridge parameters (planned ones sharded, the rest replicated).
    Collective (every rank calls it with the same plan). Raises dtensor.DTensorError for an
    unsupported style, module type or mesh."""
    work = _Parallelizer(device_mesh, named_mesh_dim(device_mesh, "tp", "parallelize_module",
                                                    "tensor-parallel mesh (e.g. mesh['tp'])"))
    plan = parallelize_plan if isinstance(parallelize_plan, dict) else (
        {"": parallelize_plan} if parallelize_plan is not None else {})
    modules = dict(module.named_modules())
    for pattern, style in plan.items():
        hits = [m for path, m in modules.items() if (path == pattern if pattern == "" else fnmatch.fnmatchcase(path, pattern))]
        if not hits:
            raise DTensorError(f"parallelize_module: '{pattern}' matches no submodule of {type(module).__name__}")
        for m in hits:
            work.apply(m, style)
    work.replicate_rest(module)
    return module
