"""dtensor.bridge: dtensor's sharding engine under ordinary PyTorch code (DESIGN §9).

`distribute(t, mesh, placements)` gives a torch tensor subclass (`bridge.DTensor`, a wrapper
subclass whose size is the global shape) holding this rank's local block. Every ATen op that reaches
`__torch_dispatch__` with one of them goes through dtensor's engine: the op's rules choose the
placements (the same cached propagation as dtensor.ops), the inputs are redistributed to them by
dtensor's collectives, and torch's own ATen kernel computes on the local blocks; the outputs are
wrapped with the engine's output placements. A strategy that carries dtensor's own distributed step
(DESIGN §6: softmax over a sharded class dim, scans, selection...) runs the whole op through dtensor
instead, since ATen has no such step. Autograd runs above dispatch, so backward ops arrive here too.

An ATen op with no dtensor rule raises UnsupportedOpError naming it: nothing is replicated silently.
See docs/PYTHON.md for the ops covered and the measured overhead.
"""
import atexit
import copy
import functools
import math
import re
import threading

import torch
import torch.utils._mode_utils
from torch.utils._pytree import tree_flatten, tree_unflatten
from torch.autograd import Function

from . import _dtensor, _native_from_local, _placements_or_replicate
from ._dtensor import DTensorError, Replicate, Shard

_b = _dtensor._bridge
aten = torch.ops.aten

__all__ = ["DTensor", "UnsupportedOpError", "allow_replicate_fallback", "distribute", "empty", "from_dtensor",
           "from_local", "full", "fully_shard", "keep_grad_layout", "ones", "parallelize_module", "rand", "randn",
           "zeros"]


class UnsupportedOpError(DTensorError, NotImplementedError):
    """An ATen op reached the bridge with no dtensor sharding rule (or bridge handler) for it."""


_STRIDES = {}  # global shape -> contiguous strides (wrappers are made on every op)


def _contiguous_strides(shape):
    strides = _STRIDES.get(shape)
    if strides is None:
        out, acc = [], 1
        for s in reversed(shape):
            out.append(acc)
            acc *= max(s, 1)
        if len(_STRIDES) > 4096:
            _STRIDES.clear()
        strides = _STRIDES[shape] = tuple(reversed(out))
    return strides


_TORCH_DTYPE_NAMES = {}  # torch.dtype -> dtensor's dtype name ("float32"), filled on first sight


def _dtype_name(dtype):
    name = _TORCH_DTYPE_NAMES.get(dtype)
    if name is None:
        name = _TORCH_DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


class DTensor(torch.Tensor):
    """A sharded tensor as a torch tensor: global size, this rank's block in `_local` (a plain torch
    tensor), its layout in `_spec` (mesh, placements, global shape, dtype)."""

    __slots__ = ("_local", "_spec", "_mesh")

    @staticmethod
    def __new__(cls, local, spec, mesh, requires_grad=False):
        shape = spec.shape
        r = torch.Tensor._make_wrapper_subclass(
            cls, shape, strides=_contiguous_strides(shape), dtype=local.dtype, device=local.device,
            requires_grad=requires_grad)
        r._local = local
        r._spec = spec
        r._mesh = mesh
        return r

    # Torch functions decompose to ATen ops as for plain tensors; only dispatch is intercepted.
    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        handler = _handlers.get(func)
        if handler is None:
            handler = _handlers[func] = _resolve(func)
        return handler(func, args, kwargs or {})

    def __repr__(self):
        return (f"bridge.DTensor(shape={tuple(self.shape)}, placements={self._spec.placements}, "
                f"dtype={self.dtype}, local={self._local!r})")

    @property
    def placements(self):
        return self._spec.placements

    @property
    def device_mesh(self):
        return self._mesh

    def to_local(self):
        """This rank's block (a torch tensor); differentiable: its gradient comes back with this
        tensor's placements."""
        return _ToLocal.apply(self)

    def full_tensor(self):
        """The whole tensor on every rank (collective: all-gather / all-reduce); differentiable."""
        return _FullTensor.apply(self)

    def __deepcopy__(self, memo):
        """copy.deepcopy (of a model: AveragedModel's EMA copy, a reference copy): a new block with the
        same values, layout and mesh, as torch's deepcopy of a tensor; requires_grad, the gradient
        and the Python attributes (a Parameter's mark) copied too. The mesh is shared, not copied:
        its communicators are the job's."""
        if id(self) in memo:
            return memo[id(self)]
        with torch.no_grad():
            new = DTensor(self._local.clone(), self._spec, self._mesh, requires_grad=self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        new.__dict__ = copy.deepcopy(self.__dict__, memo)
        return new

    def __reduce_ex__(self, protocol):
        """Pickling (torch.save of a state_dict holding bridge tensors) is refused with the ways that
        work: a bridge tensor's block is one rank's piece of a tensor whose mesh is live
        communicators, which no pickle can carry to the process that loads it."""
        raise DTensorError(f"bridge: pickling a bridge.DTensor {tuple(self.shape)} {self._spec.placements} "
                           f"(torch.save): its mesh does not travel; accepted: torch.distributed.checkpoint "
                           f"(dcp.save / dcp.load, resharding on load), or torch.save of t.full_tensor() or "
                           f"t.to_local()")

    @property
    def data(self):
        return torch.Tensor.data.__get__(self)

    @data.setter
    def data(self, new):
        """`x.data = y` (vector_to_parameters, resize_token_embeddings): torch swaps x's storage for
        y's; a bridge tensor's values are its block, so x takes y's block, layout and mesh, or a
        plain y laid out as x is (_take_block)."""
        _take_block(self, new)

    def to_dtensor(self):
        """The same block and layout as a dtensor.DTensor (no copy), for dtensor.ops; not
        differentiable across the boundary."""
        return _b.to_dtensor(self._spec, self._local)

    # ---- torch.distributed.checkpoint (DCP) -----------------------------------------------------
    # DCP's CheckpointableTensor protocol (torch/distributed/checkpoint/protocol.py): the global shape
    # and, per chunk this rank holds, its global offset, its offset in the local tensor and its size.
    # A block of dtensor's layouts is always one chunk (uneven and weighted shards included);
    # replicas name the same chunk and DCP writes it once. DCP reads the chunk through
    # __get_tensor_shard__ below (the protocol's default would index this global-shaped tensor), and
    # loads by copying into it: loading fills this rank's block in place.

    def _checkpoint_spec(self):
        if self._spec.has_partial:
            raise DTensorError(f"torch.distributed.checkpoint: a bridge.DTensor with placements "
                               f"{self._spec.placements} holds Partial pieces, not a chunk of the tensor; "
                               f"redistribute to Replicate (or Shard) first")
        return self._spec

    @property
    def global_shape(self):
        return tuple(self._spec.shape)

    @property
    def global_offsets(self):
        return (tuple(self._checkpoint_spec().local_offset),)

    @property
    def local_offsets(self):
        return ((0,) * len(self._spec.shape),)

    @property
    def local_sizes(self):
        return (tuple(self._checkpoint_spec().local_shape),)

    def __create_chunk_list__(self):
        from torch.distributed.checkpoint.metadata import ChunkStorageMetadata
        return [ChunkStorageMetadata(offsets=torch.Size(self.global_offsets[0]),
                                     sizes=torch.Size(self.local_sizes[0]))]

    def __create_write_items__(self, fqn, obj):
        from torch.distributed.checkpoint.metadata import MetadataIndex, TensorProperties
        from torch.distributed.checkpoint.planner import TensorWriteData, WriteItem, WriteItemType
        chunk = self.__create_chunk_list__()[0]
        return [WriteItem(index=MetadataIndex(fqn, chunk.offsets, 0), type=WriteItemType.SHARD,
                          tensor_data=TensorWriteData(chunk=chunk,
                                                      properties=TensorProperties.create_from_tensor(self._local),
                                                      size=torch.Size(self.global_shape)))]

    def __get_tensor_shard__(self, index):
        self._checkpoint_spec()
        if index.offset is not None and tuple(index.offset) != self.global_offsets[0]:
            raise DTensorError(f"torch.distributed.checkpoint: '{index.fqn}' asks for the chunk at "
                               f"{tuple(index.offset)}; this rank holds the one at {self.global_offsets[0]}")
        return self._local

    def redistribute(self, device_mesh=None, placements=None):
        """This tensor moved to `placements` by dtensor's collectives (DESIGN §3); differentiable:
        the gradient moves back (a Partial source gets a Replicate gradient, DESIGN §5)."""
        if device_mesh is not None and device_mesh is not self._mesh:
            raise DTensorError("bridge.DTensor.redistribute: moving to another mesh is not supported")
        if placements is None:
            return self
        return _Redistribute.apply(self, tuple(placements))


def _moved(x, placements):
    spec, local = _b.redistribute(x._spec, x._local, list(placements))
    return DTensor(local, spec, x._mesh)


class _ToLocal(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.spec, ctx.mesh = x._spec, x._mesh
        return x._local.view_as(x._local)

    @staticmethod
    def backward(ctx, grad):
        return DTensor(grad.contiguous(), ctx.spec, ctx.mesh)


class _FullTensor(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.spec, ctx.mesh = x._spec, x._mesh
        _, full = _b.redistribute(x._spec, x._local, [Replicate()] * len(x._spec.placements))
        return full

    @staticmethod
    def backward(ctx, grad):
        spec = ctx.spec
        rep = spec.with_([Replicate()] * len(spec.placements), list(spec.shape), _dtype_name(grad.dtype))
        # Every rank holds the whole gradient: its block under the source placements (R -> P keeps
        # the value on one rank of each group, so a Partial source sums back to it).
        out_spec, local = _b.redistribute(rep, grad.contiguous(), list(spec.placements))
        return DTensor(local, out_spec, ctx.mesh)


def _gradient_placements(placements):
    """Where the gradient of a tensor laid out as `placements` goes back to: the same, a Partial
    one as Replicate (DESIGN §5: each rank's piece gets the whole gradient)."""
    return tuple(Replicate() if p.is_partial() else p for p in placements)


class _Redistribute(Function):
    @staticmethod
    def forward(ctx, x, placements):
        ctx.src = _gradient_placements(x._spec.placements)
        return _moved(x, placements)

    @staticmethod
    def backward(ctx, grad):
        return _moved(grad, ctx.src), None


# ---- creation ----------------------------------------------------------------------------------

def distribute(tensor, device_mesh, placements=None):
    """`tensor` (the same on every rank) laid out over `device_mesh` as `placements` (default:
    Replicate on every mesh dim); a leaf that requires grad when `tensor` does. Collective."""
    placements = _placements_or_replicate(device_mesh, placements, "distribute_tensor")
    d = _dtensor.distribute_tensor(tensor.detach().contiguous(), device_mesh, placements)
    # A copy: the block must not alias the caller's tensor (in-place updates, gradient accumulation).
    local = _b.local_of(d).clone()
    return DTensor(local, _b.spec_of(d), device_mesh, requires_grad=tensor.requires_grad)


class _FromLocal(Function):
    @staticmethod
    def forward(ctx, local, spec, mesh):
        ctx.spec = spec
        return DTensor(local.detach(), spec, mesh)

    @staticmethod
    def backward(ctx, grad):
        # The gradient of the block, under the forward's placements, as torch's from_local gives it.
        src = _gradient_placements(ctx.spec.placements)
        if isinstance(grad, DTensor):
            if tuple(grad._spec.placements) != src:
                grad = _moved(grad, src)
            grad = grad._local
        return grad, None, None


def from_local(local, device_mesh, placements=None, shape=None):
    """A sharded tensor from this rank's block `local` (no copy; default placements Replicate);
    `shape` is the global shape, computed from the blocks (collective) when not given.
    Differentiable: `local` gets the block of the gradient under these placements."""
    placements = _placements_or_replicate(device_mesh, placements, "DTensor.from_local")
    d = _native_from_local(local.detach(), device_mesh, placements, None if shape is None else list(shape))
    return _FromLocal.apply(local, _b.spec_of(d), device_mesh)


def _aligned_with(t, first):
    """Whether `t` is a bridge tensor laid out as the bridge tensor `first`: on its mesh, with equal
    placements and global shape (so their blocks hold the same elements)."""
    return (isinstance(t, DTensor) and t._mesh is first._mesh and t._spec.placements == first._spec.placements
            and t._spec.shape == first._spec.shape)


def _block(v):
    """A bridge tensor's local block; anything else as it is."""
    return v._local if isinstance(v, DTensor) else v


def _like(block, t, placements=None):
    """A bridge tensor over `block` (its dtype) with bridge tensor t's mesh, global shape and
    placements (or `placements`)."""
    spec = t._spec
    return DTensor(block, spec.with_(list(placements or spec.placements), list(spec.shape), _dtype_name(block.dtype)),
                   t._mesh)


def keep_grad_layout(param):
    """Registers a post-accumulate-grad hook on the bridge parameter `param` that moves its
    accumulated gradient to the parameter's placements at the end of the backward: Partial
    gradients that only need reducing (Partial -> Replicate on some mesh dims, as a replicated
    weight's gradient from sharded activations) are all-reduced together, one collective per
    (mesh, placements, dtype) group over their blocks concatenated, as DDP buckets them; any other
    move (a replicated gradient sliced to a shard, ...) per gradient. Without it a gradient keeps
    the layout the backward chose, and every optimizer op that meets a Partial gradient reduces it
    again. parallelize_module and fully_shard register it on the parameters they make. Returns
    `param`."""
    def hook(p):
        g = p.grad
        if not isinstance(g, DTensor) or tuple(g._spec.placements) == tuple(p._spec.placements):
            return
        # One list per backward (graph task): a nested backward (reentrant checkpointing) moves its
        # own at its end, and a backward that raised leaves only its own list unmoved.
        lists = _grad_moves.__dict__.setdefault("by_task", {})
        task = torch._C._current_graph_task_id()
        if task not in lists:  # the first of this backward: move them all when it ends
            while len(lists) >= 16:  # the oldest: of backwards that raised, whose callback never ran
                lists.pop(min(lists))
            lists[task] = []
            torch.autograd.Variable._execution_engine.queue_callback(functools.partial(_move_pending_grads, task))
        lists[task].append(p)

    if param.requires_grad:  # a frozen parameter (whisper's positions) has no gradient to move
        param.register_post_accumulate_grad_hook(hook)
    return param


_grad_moves = threading.local()  # per rank (thread ranks share the interpreter)


def _move_pending_grads(task):
    pending = _grad_moves.by_task.pop(task, [])
    buckets = {}
    for p in pending:
        g = p.grad
        src, dst = tuple(g._spec.placements), tuple(p._spec.placements)
        if all(d == s or (s.is_partial() and d.is_replicate()) for s, d in zip(src, dst)):
            buckets.setdefault((id(g._mesh), src, dst, g.dtype), []).append(p)
        else:
            p.grad = _moved(g.detach(), dst)
    for (_, src, dst, dtype), params in buckets.items():
        grads = [p.grad for p in params]
        flat = torch.cat([g._local.reshape(-1) for g in grads])
        # The collective runs over the Partial mesh dims only, among ranks holding the same blocks
        # of the other dims, so the buffer is described as replicated there.
        spec = grads[0]._spec.with_([s if s.is_partial() else Replicate() for s in src], [flat.numel()],
                                    _dtype_name(dtype))
        _, reduced = _b.redistribute(spec, flat, [Replicate()] * len(src))
        offset = 0
        for p, g in zip(params, grads):
            n = g._local.numel()
            p.grad = _like(reduced[offset:offset + n].view(g._local.shape), g, dst)
            offset += n


def from_dtensor(d, device_mesh):
    """A dtensor.DTensor (e.g. a dtensor.ops result) as a bridge tensor over the same block (no
    copy); `device_mesh` is its mesh (the Python object the bridge tensors carry)."""
    return DTensor(_b.local_of(d), _b.spec_of(d), device_mesh)


_fallback = threading.local()  # per thread: run_threads' ranks are threads of one interpreter


class allow_replicate_fallback:
    """`with bridge.allow_replicate_fallback():` runs ops with no dtensor rule on replicated inputs
    (every input all-gathered / all-reduced, torch's kernel on the whole tensors, outputs
    Replicate) instead of raising UnsupportedOpError. Costly and opt-in, by design; it applies to
    the calling thread (rank) only."""

    def __enter__(self):
        self._prev = getattr(_fallback, "on", False)
        _fallback.on = True
        return self

    def __exit__(self, *exc):
        _fallback.on = self._prev
        return False


# ---- dispatch ----------------------------------------------------------------------------------

_handlers = {}  # OpOverload -> handler(func, args, kwargs), resolved once per overload
_registered = None


def _registry():
    global _registered
    if _registered is None:
        _registered = frozenset(_dtensor.ops.names())
    return _registered


def _routed_to_registered():
    """{ATen "name.overload": registered op} for the bridge's own handlers that run a registered op
    (a handler's `registered_op`): the rest of the ATen ops a registered op serves besides its name
    and OpDef::aten aliases (tests/python/test_core_aten.py counts them as native)."""
    return {k: h.registered_op for k, h in _OVERLOADS.items() if hasattr(h, "registered_op")}


def _layout_dependent():
    """Registered ops whose local kernel reads the layout (OpDef::aten.layout_dependent, checked
    against the kernels by tests/ops:layout_facts_test): mean divides a block's sum by the global
    count, a causal mask starts at the block's offset, embedding looks up a vocabulary shard, ...
    ATen on the block would compute something else, so these run dtensor's kernel."""
    return _facts()[0]


def _engine(name, adapt=None, localize=None, local_func=None):
    """Handler of an op with dtensor rules: `name` is the registered op whose rules apply; `adapt`
    turns the ATen args into that op's (dropping what its schema lacks); `localize` turns
    global-shape arguments of torch's call into this rank's (views, expand); `local_func` replaces
    the ATen op on the blocks."""
    dtensor_kernel = name in _layout_dependent()
    keep = -1 if adapt is None else getattr(adapt, "keep", None)
    slots = _tensor_slots(name) if keep is not None else ()

    def handler(func, args, kwargs):
        given = args  # torch's kernel gets the numbers as given (fmod.Scalar takes no tensor)
        if slots and any(i < len(args) and _is_number(args[i]) for i in slots):
            args = _wrapped_numbers(args, slots)
        # The engine's decision (C++: lowering, cached propagation); plain tensors count as replicated.
        if adapt is None:
            plan = _b.prepare(name, args, kwargs)
        else:
            plan = _b.prepare(name, *adapt(args, kwargs))
        if dtensor_kernel or plan.has_step:
            # dtensor's own distributed step (DESIGN §6) or a layout-dependent kernel: ATen cannot
            # run it on the block, dtensor's kernel does.
            outs = plan.run()
            return outs[0] if len(outs) == 1 else tuple(outs)
        largs, lkw = plan.local_args(args, kwargs)
        if given is not args:
            # The number back as a number (fmod.Scalar takes no tensor), with this rank's value of
            # its 0-d tensor: a rule may have made it Partial (add(P, 1) as P(sum): 1 on one rank only).
            largs = [a.item() if _is_number(g) else a for g, a in zip(given, largs)] + list(largs[len(given):])
        if localize is not None:
            largs, lkw = localize(largs, lkw, plan)
        return plan.wrap((local_func or func)(*largs, **lkw))

    # The native dispatch runs it without this handler where the adaptation is data: keeping the
    # first n positional args, the output's block shape as the size argument, another ATen op. A
    # number in a tensor slot comes back here.
    if keep is not None and localize in (None, _local_size):
        handler.native = (name, dtensor_kernel, keep, localize is _local_size, local_func, list(slots), handler)
    return handler


def _is_number(v):
    return isinstance(v, (int, float, complex))  # bool is an int: torch wraps it too


_slots_cache = {}
_schemas_cache = None


def _schemas():
    """dtensor.ops.schemas(), read once: op name -> [(name, type, ...)] per argument."""
    global _schemas_cache
    if _schemas_cache is None:
        _schemas_cache = _dtensor.ops.schemas()
    return _schemas_cache


def _tensor_slots(name):
    """Positions of the registered op's positional Tensor arguments (dtensor.ops.schemas()): a
    decomposition may put a number first (sub(1, x))."""
    if not _slots_cache:
        for op, args in _schemas().items():
            _slots_cache[op] = tuple(i for i, (_, typ, _, _, kw_only) in enumerate(args)
                                     if typ == "Tensor" and not kw_only)
    return _slots_cache.get(name, ())


def _wrapped_numbers(args, slots):
    """torch's wrapped numbers (`x - 1` reaches dispatch as sub.Tensor(x, 1)) as 0-d tensors of the
    dtype torch's promotion gives them against the call's first tensor: its dtype when the number's
    kind (bool < int < float) is not above the tensor's, else torch's default for the kind. Rules
    and torch's kernel then see a replicated 0-d tensor, which broadcasts."""
    ref = next((a for a in args if isinstance(a, torch.Tensor)), None)

    def kind(dt):
        return 3 if dt.is_complex else 2 if dt.is_floating_point else (0 if dt == torch.bool else 1)

    default_complex = torch.complex128 if torch.get_default_dtype() == torch.float64 else torch.complex64
    defaults = {0: torch.bool, 1: torch.int64, 2: torch.get_default_dtype(), 3: default_complex}  # by kind
    out = list(args)
    for i in slots:
        if i < len(out) and _is_number(out[i]):
            v = out[i]
            k = 3 if isinstance(v, complex) else 2 if isinstance(v, float) else (0 if isinstance(v, bool) else 1)
            dtype = ref.dtype if ref is not None and k <= kind(ref.dtype) else defaults[k]
            out[i] = torch.tensor(v, dtype=dtype)
    return tuple(out)


def _local_size(largs, lkw, plan):
    # view/reshape/expand take the global size; on a block the size is the output's block shape.
    largs[1] = list(plan.outputs[0].local_shape)
    return largs, lkw


def _drop_after(n):
    """adapt: keep the first n positional args (the registered op's), and no kwargs."""
    adapt = lambda a, k: (a[:n], {})  # noqa: E731
    adapt.keep = n  # what the native dispatch does instead
    return adapt


def _to_dtype_adapt(a, k):
    # to.dtype(self, dtype, non_blocking, copy, memory_format): reaches dispatch from code run inside
    # it (decompositions), where composite ops are not expanded by autograd first.
    return a[:2], {}


_to_dtype_adapt.keep = 2


def _to_adapt(a, k):
    # _to_copy(x, *, dtype, layout, device, ...) -> to(x, dtype): only a dtype change has a rule.
    if k.get("dtype") is None:
        raise UnsupportedOpError(f"bridge: aten._to_copy without a dtype ({k}) is not supported; "
                                 f"accepted: a dtype change on the same device")
    return a[:1], {"dtype": k["dtype"]}


def _keep_grad_and_input(a, k):
    # Backward of a pointwise op: (grad_output, input or output[, scalars]). Its sharding is
    # gelu_backward's: pointwise with broadcasting, linear in the gradient only.
    return a[:2], {}


_keep_grad_and_input.keep = 2  # the native dispatch keeps the first 2 args itself


def _embedding_backward_adapt(a, k):
    # embedding_dense_backward(grad, indices, num_weights, padding_idx, scale_grad_by_freq):
    # dtensor's has no scale_grad_by_freq.
    a = list(a) + [k[n] for n in ("padding_idx", "scale_grad_by_freq") if n in k]
    if len(a) > 4 and a[4]:
        raise UnsupportedOpError("bridge: aten.embedding_dense_backward with scale_grad_by_freq=True "
                                 "has no dtensor rule; accepted: scale_grad_by_freq=False")
    return a[:4], {}


_REDUCTIONS = ("none", "mean", "sum")  # ATen's int reduction -> dtensor's str


def _nll_loss_forward(func, args, kwargs):
    """nll_loss_forward(self, target, weight, reduction, ignore_index) -> (output, total_weight):
    output by dtensor's nll_loss (a layout-dependent kernel: global batch count), total_weight (the
    count of non-ignored targets, used only by the backward) by the engine on the target."""
    b = _bind(func, args, kwargs)
    x, target, weight = b["self"], b["target"], b.get("weight")
    reduction, ignore_index = b.get("reduction", 1), b.get("ignore_index", -100)
    if weight is not None:
        return _nll_loss_weighted(x, target, weight, reduction, ignore_index)
    plan = _b.prepare("nll_loss", (x, target), {"reduction": _REDUCTIONS[reduction],
                                                "ignore_index": ignore_index})
    (output,) = plan.run()
    total = (target != ignore_index).sum().to(x.dtype)
    return output, total


def _nll_terms(x, target, weight, ignore_index):
    """(target with ignored entries 0, each target's class weight (0 where ignored), the class dim)
    of nll_loss with class weights, through the engine's ops."""
    cdim = 0 if x.dim() == 1 else 1
    kept = target != ignore_index
    safe = torch.where(kept, target, torch.zeros_like(target))
    w = aten.index_select.default(weight, 0, safe.reshape(-1)).reshape(safe.shape)
    return safe, torch.where(kept, w, torch.zeros_like(w)), cdim


def _nll_loss_weighted(x, target, weight, reduction, ignore_index):
    """nll_loss_forward with class weights (ATen's definition): -weight[t] * x[t] per element, summed,
    or divided by the weights' sum for 'mean'; total_weight is that sum. Composed of the engine's
    gather, index_select, where and sums (every layout their rules take)."""
    safe, w, cdim = _nll_terms(x, target, weight, ignore_index)
    loss = -(w * torch.gather(x, cdim, safe.unsqueeze(cdim)).squeeze(cdim))
    total = w.sum()
    if reduction == 0:
        return loss, total
    return (loss.sum() if reduction == 2 else loss.sum() / total), total


def _nll_loss_backward(func, args, kwargs):
    """nll_loss_backward: dtensor's op without class weights; with them, -weight[t] * grad scattered
    into zeros at each target's class (divided by total_weight for 'mean'), as ATen."""
    b = _bind(func, args, kwargs)
    weight = b.get("weight")
    if weight is None:
        return _nll_loss_backward_engine()(func, args, kwargs)
    x, target, reduction = b["self"], b["target"], b["reduction"]
    safe, w, cdim = _nll_terms(x, target, weight, b["ignore_index"])
    grad = b["grad_output"] / b["total_weight"] if reduction == 1 else b["grad_output"]
    values = -(w * grad)
    return torch.zeros_like(x).scatter(cdim, safe.unsqueeze(cdim), values.unsqueeze(cdim))


@functools.lru_cache(maxsize=None)
def _nll_loss_backward_engine():
    return _engine(*_facts()[1]["nll_loss_backward"])


def _nll_loss_backward_adapt(a, k):
    # nll_loss_backward(grad, self, target, weight, reduction, ignore_index, total_weight): dtensor's
    # takes the reduction by name and no total_weight (it counts the targets itself).
    grad, x, target, weight, reduction, ignore_index = a[:6]
    if weight is not None:
        raise UnsupportedOpError("bridge: aten.nll_loss_backward with class weights has no dtensor "
                                 "rule; accepted: weight=None")
    return (grad, x, target), {"reduction": _REDUCTIONS[reduction], "ignore_index": ignore_index}


def _margin_loss_backward(func, args, kwargs):
    """multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction) and
    multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target): each sample's
    gradient reads only its own row (self, target, is_target) and the whole class weight, so torch's
    kernel runs on batch blocks (self [N, C]'s dim-0 Shards kept, every other dim and weight whole,
    grad_output whole unless it is the per-sample [N] of reduction 'none'). 'mean' divides by the
    global N: a block runs 'sum' with grad_output / N instead (the kernel would divide by its own N).
    A 1-d self (one sample) or a plain tensor argument: every argument whole on every rank."""
    b = _bind(func, args, kwargs)
    b.update({a.name: a.default_value for a in func._schema.arguments if a.name not in b and a.has_default_value()})
    x = b["self"]
    batched = {"self", "target", "is_target"} & b.keys() | ({"grad_output"} if b["grad_output"].dim() == 1 else set())
    whole = [Replicate()] * len(x._spec.placements)
    split = x.dim() == 2 and all(isinstance(b[k], DTensor) for k in batched)
    target = _batch_shards(x) if split else whole
    sharded = any(p.is_shard() for p in target)
    blocks = {k: (_moved(v, target if k in batched else whole)._local if isinstance(v, DTensor) else v)
              for k, v in b.items()}
    if sharded and blocks["reduction"] == 1:
        blocks["grad_output"] = blocks["grad_output"] / x.shape[0]
        blocks["reduction"] = 2
    names = [a.name for a in func._schema.arguments]
    out = func(*[blocks[n] for n in names if n in blocks])
    return _wrapped_blocks(out, x, target, lambda block: x.shape)


def _multilabel_margin_loss_forward(func, args, kwargs):
    """torch's decomposition, whose per-sample loss (reduction 'none') of a 1-d input (one sample)
    is [1] where ATen's kernel gives a 0-d loss: reshaped to ATen's."""
    from torch._decomp import decomposition_table

    output, is_target = decomposition_table[func](*args, **kwargs)
    if args[0].dim() == 1 and output.dim() == 1:
        output = output.reshape([])
    return output, is_target


def _unbiased_adapt(a, k):
    # var.dim/std.dim(self, dim, unbiased=True, keepdim=False) -> var(self, dim, *, correction, keepdim)
    a = list(a) + [None] * (4 - len(a))
    unbiased = k.get("unbiased", True if a[2] is None else a[2])
    keepdim = k.get("keepdim", False if a[3] is None else a[3])
    return (a[0], a[1]), {"correction": 1 if unbiased else 0, "keepdim": keepdim}


def _var_mean(func, args, kwargs):
    """var_mean.correction(self, dim, *, correction, keepdim) as var and mean, each through the engine
    (torch's own decomposition reaches prims.var, which has no rule)."""
    bound = _bind(func, args, kwargs)
    x, dim, keepdim = bound["self"], bound.get("dim"), bound.get("keepdim", False)
    correction = bound.get("correction")
    if correction is None:  # var_mean.dim's unbiased, default True
        correction = 1 if bound.get("unbiased", True) else 0
    # dim None is every dim: mean.dim over all of them keeps them as size 1 under keepdim, as var does
    # (mean.default would drop them).
    return (aten.var.correction(x, dim, correction=correction, keepdim=keepdim),
            aten.mean.dim(x, list(range(x.dim())) if dim is None else dim, keepdim))


def _powsum(func, args, kwargs):
    """linalg__powsum(self, ord=2, dim=None, keepdim=False, *, dtype=None): sum(|x|^ord) over `dim`
    (every dim when None or empty), the input cast to `dtype` first: torch's documented formula
    (torch/linalg/__init__.py, linalg._powsum; 0^0 = 1, so ord 0 counts every element), as abs,
    pow and sum through the engine (no torch decomposition exists). A real result for complex x."""
    b = _bind(func, args, kwargs)
    x, order = b["self"], b.get("ord", 2)
    if b.get("dtype") is not None:
        x = x.to(b["dtype"])
    dim = b.get("dim")
    dims = list(range(x.dim())) if not dim else list(dim)
    return aten.sum.dim_IntList(aten.pow.Tensor_Scalar(aten.abs.default(x), order), dims, b.get("keepdim", False))


def _take_block(x, y):
    """x (a bridge tensor) takes bridge tensor y's block, layout and mesh, its torch metadata
    (shape, dtype) too: `x.data = y` and `x.set_(y)`, which make x share y's storage in torch. A
    plain y is the same on every rank (the bridge's rule for plain tensors) and is laid out as x is
    first (Partial dims replicated): resize_token_embeddings assigns a plain, larger weight.
    Collective then (every rank makes the assignment)."""
    if type(y) is not DTensor:
        y = distribute(y, x._mesh, [Replicate() if p.is_partial() else p for p in x._spec.placements])
    torch.Tensor.data.__set__(x, y)  # not dispatched: the wrapper's sizes and dtype
    x._local, x._spec, x._mesh = y._local, y._spec, y._mesh
    return x


def _weight_norm_interface_backward(func, args, kwargs):
    """_weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim) -> (grad_v, grad_g)
    (nn.utils.weight_norm and parametrizations.weight_norm on dim 0 or the last: the fused forward
    torch differentiates with this op) by ATen's formula (aten/src/ATen/native/WeightNorm.cpp,
    _weight_norm_differentiable_backward), through the engine: with s = sum(grad_w * v) over every
    dim but `dim` (kept), grad_g = s / norms and grad_v = (g / norms) * (grad_w - v * s / norms^2)."""
    b = _bind(func, args, kwargs)
    grad_w, v, g, norms, dim = b["grad_w"], b["saved_v"], b["saved_g"], b["saved_norms"], b["dim"]
    dim = dim % v.dim()
    others = [d for d in range(v.dim()) if d != dim]
    sums = aten.sum.dim_IntList(aten.mul.Tensor(grad_w, v), others, True) if others else aten.mul.Tensor(grad_w, v)
    grad_v = aten.mul.Tensor(aten.div.Tensor(g, norms), aten.sub.Tensor(
        grad_w, aten.mul.Tensor(v, aten.div.Tensor(sums, aten.mul.Tensor(norms, norms)))))
    return grad_v, aten.div.Tensor(sums, norms)


def _embedding_renorm_(func, args, kwargs):
    """embedding_renorm_(self, indices, max_norm, norm_type) (nn.Embedding(max_norm=...), under
    no_grad): each row of the weight that `indices` names, once, whose norm exceeds max_norm is
    scaled by max_norm / (norm + 1e-7), ATen's formula (aten/src/ATen/native/Embedding.cpp); the
    rows gathered, scaled and written back through the engine's index and index_put. The
    indices are whole on every rank first (a row is renormed once however many ranks name it)."""
    b = _bind(func, args, kwargs)
    weight, indices = b["self"], b["indices"]
    indices = indices.full_tensor() if type(indices) is DTensor else indices
    rows = torch.unique(indices.reshape(-1))
    picked = aten.index.Tensor(weight, [rows])
    norms = aten.linalg_vector_norm.default(picked, b["norm_type"], [1], True)
    max_norm = b["max_norm"]
    scale = aten.where.self(aten.gt.Scalar(norms, max_norm), aten.div.Tensor(
        aten.full_like.default(norms, max_norm), aten.add.Scalar(norms, 1e-7)), aten.ones_like.default(norms))
    aten.index_put_.default(weight, [rows], aten.mul.Tensor(picked, scale))
    return weight


def _amp_unscale(func, args, kwargs):
    """_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale) (torch.amp.GradScaler's
    unscale_): each gradient multiplied by inv_scale, and found_inf set to 1 when any element of any
    of them is inf or NaN, as ATen's kernel; a bridge gradient's check covers its whole tensor (its
    all() is reduced over the ranks holding pieces), plain tensors go to torch's kernel."""
    b = _bind(func, args, kwargs)
    found_inf, inv_scale = b["found_inf"], b["inv_scale"]
    plain = [t for t in b["self"] if type(t) is not DTensor]
    if plain:
        func(plain, found_inf, inv_scale)
    for t in b["self"]:
        if type(t) is DTensor:
            bad = aten.logical_not.default(aten.all.default(aten.isfinite.default(t)))
            bad = bad.full_tensor() if type(bad) is DTensor else bad
            found_inf.copy_(torch.maximum(found_inf, bad.to(found_inf.dtype)))
            t.mul_(inv_scale)


def _bind(func, args, kwargs):
    """An ATen call's arguments by name (its schema's), defaults left out."""
    bound = {a.name: v for a, v in zip(func._schema.arguments, args)}
    bound.update(kwargs)
    return bound


def _sdpa_flash_cpu(func, args, kwargs):
    """_scaled_dot_product_flash_attention_for_cpu -> (output, logsumexp): output by dtensor's
    scaled_dot_product_attention (its rules and kernel); logsumexp, which torch's autograd keeps for
    the backward (dtensor's backward recomputes what it needs), from the scores through the engine."""
    b = _bind(func, args, kwargs)
    q, k, v = b["query"], b["key"], b["value"]
    if b.get("dropout_p", 0.0):
        raise UnsupportedOpError(f"bridge: {func} with dropout_p={b['dropout_p']} has no dtensor rule "
                                 f"(query {q._spec}); accepted: dropout_p=0")
    mask, causal, scale = b.get("attn_mask"), b.get("is_causal", False), b.get("scale")
    kw = {"is_causal": causal, "scale": scale}
    if mask is not None:
        kw["attn_mask"] = mask
    k, v = _repeat_kv(q, k), _repeat_kv(q, v)
    (out,) = _b.prepare("scaled_dot_product_attention", (q, k, v), kw).run()
    scores = aten.matmul.default(q, aten.transpose.int(k, -2, -1))
    scores = aten.mul.Tensor(scores, scale if scale is not None else q.shape[-1] ** -0.5)
    if causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = aten.masked_fill.Scalar(scores, aten.eq.Scalar(keep, False), float("-inf"))  # not keep
    if mask is not None:  # the flash kernel takes an additive float mask (F.sdpa converts bools)
        scores = aten.add.Tensor(scores, mask)
    return out, aten.logsumexp.default(scores, [-1])


def _repeat_kv(q, kv):
    """Grouped-query attention (enable_gqa: fewer key/value heads than query heads): each key/value
    head repeated for its group of query heads, [B, Hkv, S, E] -> [B, Hq, S, E], through the engine
    (unsqueeze, expand, reshape: a head-sharded kv stays sharded with its query heads)."""
    hq, hkv = q.shape[-3], kv.shape[-3]
    if hq == hkv:
        return kv
    if kv.dim() < 3 or hq % hkv:
        raise UnsupportedOpError(f"bridge: scaled_dot_product_attention with {hq} query heads and {hkv} "
                                 f"key/value heads; accepted: a multiple (grouped-query attention)")
    shape = list(kv.shape)
    x = aten.unsqueeze.default(kv, -3)
    x = aten.expand.default(x, shape[:-2] + [hq // hkv] + shape[-2:])
    return aten.reshape.default(x, shape[:-3] + [hq] + shape[-2:])


def _sum_kv_groups(grad, kv):
    """_repeat_kv's backward: the gradient of the repeated [B, Hq, S, E] summed over each group of
    query heads back to kv's [B, Hkv, S, E] (kv itself when nothing was repeated)."""
    hq, hkv = grad.shape[-3], kv.shape[-3]
    if hq == hkv:
        return grad
    shape = list(kv.shape)
    return aten.sum.dim_IntList(aten.reshape.default(grad, shape[:-3] + [hkv, hq // hkv] + shape[-2:]), [-3])


def _sdpa_flash_cpu_backward(func, args, kwargs):
    """_scaled_dot_product_flash_attention_for_cpu_backward(grad_out, q, k, v, out, logsumexp,
    dropout_p, is_causal, *, attn_mask, scale) -> (grad_q, grad_k, grad_v) by dtensor's
    _scaled_dot_product_attention_backward (its rules and kernel; logsumexp is not used). With
    grouped-query attention the keys and values are repeated as in the forward and each group's
    gradients summed back to its key/value head."""
    b = _bind(func, args, kwargs)
    q, k, v = b["query"], b["key"], b["value"]
    kw = {"is_causal": b.get("is_causal", False), "scale": b.get("scale")}
    if b.get("attn_mask") is not None:
        kw["attn_mask"] = b["attn_mask"]
    kr, vr = _repeat_kv(q, k), _repeat_kv(q, v)
    gq, gk, gv = _b.prepare("_scaled_dot_product_attention_backward",
                            (b["grad_out"], q, kr, vr, b["out"]), kw).run()
    return gq, _sum_kv_groups(gk, k), _sum_kv_groups(gv, v)


def _grouped_mm_adapt(a, k):
    # _grouped_mm(self, mat2, offs, bias, out_dtype) -> dtensor's grouped_mm(self, mat2, offs).
    b = dict(zip(("self", "mat2", "offs", "bias", "out_dtype"), a))
    b.update(k)
    if b.get("bias") is not None or b.get("out_dtype") is not None:
        raise UnsupportedOpError(f"bridge: aten._grouped_mm with bias or out_dtype has no dtensor rule "
                                 f"(self {b['self']._spec}); accepted: bias=None, out_dtype=None")
    return (b["self"], b["mat2"], b.get("offs")), {}


# How an alias's arguments become its op's (OpDef::aten.aliases names them; "keep:N" and "" are data).
# An adapter may drop arguments but must keep the order of the call's tensors: torch's op then runs
# on the original arguments with the moved blocks substituted in that order (plan.local_args).
# Numbers in tensor positions need no adapter (the wrapped-number path, _wrapped_numbers).
def _check_same_device(op, x, device):
    """The *_like ops make x's layout on x's device: another device (a `device` argument) is refused."""
    if device is not None and torch.device(device) != x.device:
        raise UnsupportedOpError(f"bridge: {op} of {x._spec} onto device {device}; accepted: self's device")


def _philox_dropout_adapt(a, k):
    """native_dropout(input, p, train) -> philox_dropout(input, p, seed, offset); train=False is
    p = 0 (the input and an all-True mask, as ATen returns)."""
    b = _bind(aten.native_dropout.default, a, k)
    x, p = b["input"], b["p"]
    seed, offset = _philox_key(x)
    return (x, 0.0 if b.get("train") is False else float(p), seed, offset), {}


def _philox_like_adapt(a, k):
    """rand_like / randn_like(self, *, dtype, layout, device, ...) -> philox_*_like(self, seed,
    offset, dtype=...): the draw of self's global shape, self's blocks drawn where they are."""
    x = a[0]
    _check_same_device("rand_like/randn_like", x, k.get("device"))
    seed, offset = _philox_key(x)
    return (x, seed, offset), {"dtype": _dtype_name(k.get("dtype") or x.dtype)}


def _philox_bernoulli_adapt(a, k):
    """bernoulli.p(self, p, *, generator) -> philox_bernoulli(self, p, seed, offset, dtype=self's)."""
    b = _bind(aten.bernoulli.p, a, k)  # bernoulli_.float's arguments have the same names
    x = b["self"]
    if b.get("generator") is not None:
        raise UnsupportedOpError(f"bridge: bernoulli with an explicit generator on a sharded tensor {x._spec}; "
                                 f"accepted: generator=None (dtensor seeds per mesh)")
    seed, offset = _philox_key(x)
    return (x, float(b.get("p", 0.5)), seed, offset), {"dtype": _dtype_name(x.dtype)}


def _full_like_adapt(a, k):
    """full_like(self, fill_value, *, dtype, layout, device, pin_memory, memory_format) ->
    full_like(self, fill_value, dtype=...): a strided tensor on self's device (the memory format
    changes no value)."""
    b = _bind(aten.full_like.default, a, k)
    x = b["self"]
    _check_same_device("full_like", x, b.get("device"))
    if b.get("layout") not in (None, torch.strided):
        raise UnsupportedOpError(f"bridge: full_like of {x._spec} with layout {b['layout']}; accepted: torch.strided")
    return (x, b["fill_value"]), {"dtype": _dtype_name(b.get("dtype") or x.dtype)}


_ADAPTERS = {
    "philox_dropout": _philox_dropout_adapt,
    "philox_like": _philox_like_adapt,
    "philox_bernoulli": _philox_bernoulli_adapt,
    "to_copy": _to_adapt,
    "full_like": _full_like_adapt,
    "unbiased": _unbiased_adapt,
    "embedding_backward": _embedding_backward_adapt,
    "nll_loss_backward": _nll_loss_backward_adapt,
    "grouped_mm": _grouped_mm_adapt,
}


def _adapter(key):
    if not key:
        return None
    if key.startswith("keep:"):
        return _drop_after(int(key[5:]))
    return _ADAPTERS[key]


def _aten_op(name):
    """'reshape' -> aten.reshape.default, 'var.dim' -> aten.var.dim."""
    base, _, overload = name.partition(".")
    return getattr(getattr(aten, base), overload or "default")


_facts_cache = None


def _facts():
    """(layout-dependent op names, {ATen name: _engine arguments}) from the registry's per-op facts
    (dtensor.ops.aten_facts(), OpDef::aten in ops/registry.h), read once."""
    global _facts_cache
    if _facts_cache is None:
        layout, aliases = set(), {}
        for op, (dependent, op_aliases, *_) in _dtensor.ops.aten_facts().items():
            if dependent:
                layout.add(op)
            for alias, adapt, local_size, local in op_aliases:
                aliases[alias] = (op, _adapter(adapt), _local_size if local_size else None,
                                  _aten_op(local) if local else None)
        _facts_cache = (frozenset(layout), aliases)
    return _facts_cache



def _same_layout(func, args, kwargs):
    """detach, alias, clone: metadata or copy only; the block keeps its layout."""
    x = args[0]
    return DTensor(func(x._local, *args[1:], **kwargs), x._spec, x._mesh)


def _answered_by(name, convert):
    """Handler of an ATen query whose answer is a number, run as the registered op `name`
    (ops/metadata/): its 0-d Replicate result becomes the Python number torch expects (`convert`:
    int, bool, or the element's value). _local_scalar_dense (Tensor.item()): the op's only rule is
    Replicate, so the engine reduces a Partial and gathers a Shard first (a collective: every rank
    calls it, as full_tensor), and the value is the global one on every rank; PyTorch DTensor returns
    the rank's own block's value instead (for a Partial, this rank's piece). More or fewer than one
    element raises RuntimeError, as torch does, with dtensor's message naming the op and shape. The size queries (sym_size.int, ...)
    answer from self's global metadata where it lies, no data moved; torch reaches them here only
    when called on this class's dispatch directly: aten.sym_size.int(d, k) and d.size(k) are
    CompositeImplicitAutograd, answered above dispatch from the wrapper's global sizes and
    contiguous strides (DTensor.__new__), the same answers."""
    def handler(func, args, kwargs):
        fmt = kwargs.get("memory_format", args[1] if name == "sym_is_contiguous" and len(args) > 1 else None)
        if fmt is not None:  # torch.channels_last -> "channels_last", the op's MemoryFormat by name
            args, kwargs = args[:1], {"memory_format": str(fmt).replace("torch.", "")}
        try:
            (out,) = _b.prepare(name, args, kwargs).run()
        except DTensorError as e:
            if name != "_local_scalar_dense":
                raise
            raise RuntimeError(str(e)) from e  # torch's type for item() of a non-scalar
        return convert(out._local)

    handler.registered_op = name
    return handler


def _shard_as(p, dim):
    """Shard(dim) with p's weights (a weighted shard keeps its shares on its new dim)."""
    return Shard(dim, list(p.weights)) if p.weights else Shard(dim)


def _without_masks(indices):
    """Advanced indices with each bool (or uint8) mask replaced by its nonzero positions, one int64
    index per masked dim, as torch does before indexing (a DTensor mask gathered first: its
    positions depend on every element); other entries as given."""
    out = []
    for t in indices:
        if t is not None and t.dtype in (torch.bool, torch.uint8):
            t = t.full_tensor() if type(t) is DTensor else t
            out.extend(t.nonzero().unbind(1))
        else:
            out.append(t)
    return out


def _index(func, args, kwargs):
    """aten.index.Tensor (x[i], x[:, i, j], x[mask]): the registered op index.Tensor
    (ops/indexing/advanced_defs.cc: its rules keep x's Shards on the dims left alone, make Partial
    pieces of a Shard on an indexed dim, pass Partials). The op refuses a bool mask (its positions
    are data), so this handler only expands masks to their nonzero positions first."""
    bound = _bind(func, args, kwargs)
    return _index_engine(aten.index.Tensor, (bound["self"], _without_masks(bound["indices"])), {})


def _index_put(func, args, kwargs):
    """aten.index_put (x[i] = v, and index's gradient with accumulate=True; index_put_ reaches it
    through _in_place): the registered op index_put (ops/indexing/advanced_defs.cc), after masks are
    expanded to their nonzero positions as for _index. A plain x with a DTensor values counts as
    replicated over values' mesh (trace's backward writes a sharded gradient into torch's zeros)."""
    bound = _bind(func, args, kwargs)
    return _index_put_engine(aten.index_put.default, (bound["self"], _without_masks(bound["indices"]),
                                                      bound["values"], bound.get("accumulate", False)), {})


_batch_norm_engine = None


def _batch_norm_legit(func, args, kwargs):
    """ATen's batch norm forms through the registered op _native_batch_norm_legit_functional
    (ops/norm/batch_norm_defs.cc: channels sharded, or a batch or spatial dim with the statistics
    all-reduced in training): native_batch_norm (what nn.BatchNorm reaches), _native_batch_norm_legit
    and _batch_norm_with_update (training: the new running statistics are copied into the given ones
    by the bridge's copy_, which keeps their layout), their .no_stats form (no running statistics:
    training only), _native_batch_norm_legit_no_training and _batch_norm_no_update (evaluation).
    Returns ATen's outputs: (out, save_mean, save_invstd), and the empty uint8 reserve of the
    _batch_norm_*_update forms (a plain tensor: cuDNN's workspace, unused on CPU). Raises DTensorError
    for evaluation without running statistics (ATen: running_mean must be defined in evaluation mode)."""
    global _batch_norm_engine
    if _batch_norm_engine is None:
        _batch_norm_engine = _engine("_native_batch_norm_legit_functional")
    b = _bind(func, args, kwargs)
    x = b["input"]
    base = func._schema.name.split("::", 1)[1]
    training = b["training"] if "training" in b else base == "_batch_norm_with_update"
    rm, rv = b.get("running_mean"), b.get("running_var")
    if rm is None or rv is None:  # no running statistics: neither read (training) nor updated
        if not training:
            raise DTensorError(f"bridge: {func}: running_mean must be defined in evaluation mode (as ATen)")
        rm, rv = (distribute(torch.full((x.shape[1],), v, dtype=x.dtype), x._mesh) if isinstance(x, DTensor) else
                  torch.full((x.shape[1],), v, dtype=x.dtype) for v in (0.0, 1.0))
    functional = aten._native_batch_norm_legit_functional.default
    outs = _batch_norm_engine(functional, (x, b.get("weight"), b.get("bias"), rm, rv, training, b["momentum"],
                                           b["eps"]), {})
    if training and b.get("running_mean") is not None and b.get("running_var") is not None:
        for running, new in ((b["running_mean"], outs[3]), (b["running_var"], outs[4])):
            # plain running statistics (a module's buffers, which parallelize_module leaves as
            # they are, as torch's) take the global statistics, whatever layout the rule chose
            running.copy_(new.full_tensor() if type(new) is DTensor and type(running) is not DTensor else new)
    if base.startswith("_batch_norm_"):
        return (*outs[:3], torch.empty(0, dtype=torch.uint8))
    return tuple(outs[:3])


_batch_norm_legit.registered_op = "_native_batch_norm_legit_functional"


def _put(func, args, kwargs):
    """aten.put(x, index, source, accumulate) (Tensor.put_, and take's gradient): index_put on x
    flattened, reshaped back."""
    bound = _bind(func, args, kwargs)
    x, index, source = bound["self"], bound["index"], bound["source"]
    flat = aten.index_put.default(aten.reshape.default(x, [-1]), [aten.reshape.default(index, [-1])],
                                  aten.reshape.default(source, [-1]), bound.get("accumulate", False))
    return aten.reshape.default(flat, list(x.shape))


def _matrix_transpose(func, args, kwargs):
    """mT / mH / adjoint (decompositions call them: _euclidean_dist's x2.mT): the last two dims
    swapped (dtensor's dtypes are real, so mH and adjoint conjugate nothing)."""
    return aten.transpose.int(args[0], -2, -1)


def _expand_as(func, args, kwargs):
    """expand_as(self, other) (decompositions call it): expand to other's global shape."""
    return aten.expand.default(args[0], list(args[1].shape))


def _fill_like(func, args, kwargs):
    """ones_like/zeros_like/empty_like (autograd's seed of backward): a fresh tensor of the input's
    shape, on its device. A Partial input's block has the whole shape along that mesh dim, so the
    filled block is laid out as Replicate there (filling Partial(sum) pieces with ones would sum to
    k). full_like is dtensor's own op (ops/view/copy_defs.cc, _full_like_adapt)."""
    x = args[0]
    _check_same_device(func, x, kwargs.get("device"))
    local = func(x._local, *args[1:], **kwargs)
    spec = x._spec
    if spec.has_partial or _dtype_name(local.dtype) != spec.dtype:
        spec = spec.with_([Replicate() if p.is_partial() else p for p in spec.placements],
                          list(spec.shape), _dtype_name(local.dtype))
    return DTensor(local, spec, x._mesh)


def _view_apart(x):
    """Whether x is a bridge view whose block is not a view of its base's block (the view needed
    communication: a slice or select of a sharded dim gathers; a Partial base was reduced; the
    diagonal of a sharded matrix is a Partial(sum)), so that a write into its block alone would
    leave the base unchanged. Every rank decides alike (a rank with an empty block may not see it):
    one flag all-reduced (max)."""
    if not x._is_view():
        return False
    base = x._base
    if type(base) is not DTensor or base._mesh is not x._mesh:
        return False
    mine, theirs = x._local.untyped_storage().data_ptr(), base._local.untyped_storage().data_ptr()
    apart = mine != theirs and not (mine == 0 and theirs == 0)  # two empty blocks tell nothing
    spec = x._spec.with_([_dtensor.Partial("max")] * len(x._spec.placements), [], "float64")
    _, flag = _b.redistribute(spec, torch.tensor(float(apart), dtype=torch.float64),
                              [Replicate()] * len(x._spec.placements))
    return flag.item() > 0


def _write_to_base(func, x):
    """After an in-place write into a view x apart from its base (_view_apart): x's values written
    into the base where x's elements live, in the base's own blocks (so the base, and the views that
    share its blocks, see the write, as torch's views do; torch's householder_product backward
    writes the diagonal of a sharded matrix). Where they live: torch's view replay (x._view_func)
    on the base's element positions; the values go in by index_put on the flattened base. Without
    a replay (a view torch cannot repeat) the write is refused, naming both layouts."""
    base = x._base
    n = len(base._spec.placements)
    keep = [Replicate() if p.is_partial() else p for p in base._spec.placements]
    positions = DTensor(torch.arange(base.numel(), dtype=torch.int64).reshape(base.shape),
                        base._spec.with_([Replicate()] * n, list(base.shape), "int64"), base._mesh)
    try:
        where = x._view_func(positions if keep == [Replicate()] * n else _moved(positions, keep))
    except Exception as e:  # noqa: BLE001 - no replay of this view
        raise UnsupportedOpError(
            f"bridge: aten.{func._schema.name.split('::')[1]}: an in-place write into a view {list(x.shape)} "
            f"{x._spec.placements} of a sharded tensor {list(base.shape)} {base._spec.placements} whose block is "
            f"not a view of the tensor's block, and torch cannot replay the view to write the tensor "
            f"({type(e).__name__}: {e}); accepted: an out-of-place op, or the tensor redistributed so that the "
            f"view is local (e.g. replicated along the sliced dim)") from e
    values = x if not x._spec.has_partial else _moved(x, [Replicate() if p.is_partial() else p
                                                          for p in x._spec.placements])
    whole = base if not base._spec.has_partial else _moved(base, keep)  # its pieces become the new value's
    flat = aten.index_put.default(aten.reshape.default(whole, [-1]), [aten.reshape.default(where, [-1])],
                                  aten.reshape.default(values, [-1]))
    new = aten.reshape.default(flat, list(base.shape))
    if list(new._spec.placements) != list(base._spec.placements):
        new = _moved(new, base._spec.placements)
    base._local.copy_(new._local)


def _wrapper_query(func, args, kwargs):
    """A query of tensors' metadata (_has_same_storage_numel, which torch's view replay asks):
    torch's own kernel on the wrappers (global sizes and storage), not on blocks."""
    with torch.utils._mode_utils.no_dispatch():
        return func(*args, **kwargs)


def _fill_(func, args, kwargs):
    """zero_/fill_ (optimizer.zero_grad(set_to_none=False), initializers): every block filled; a
    Partial tensor becomes Replicate there (c in every Partial(sum) piece would sum to k*c). A view
    of a Partial tensor (its block a view of the tensor's) stays Partial, as its base does: c in
    the Partial(sum) pieces of coordinate 0 and 0 in the others (every piece c for avg, max, min)."""
    x = args[0]
    apart = _view_apart(x)
    if x._spec.has_partial and x._is_view() and not apart:
        coord = x._mesh.get_coordinate()
        mine = all(coord[d] == 0 for d, p in enumerate(x._spec.placements) if p == _dtensor.Partial("sum"))
        func(x._local, *args[1:], **kwargs) if mine else x._local.zero_()
        return x
    func(x._local, *args[1:], **kwargs)
    if x._spec.has_partial:
        x._spec = x._spec.with_([Replicate() if p.is_partial() else p for p in x._spec.placements],
                                list(x._spec.shape), x._spec.dtype)
    if apart:
        _write_to_base(func, x)
    return x


def _new_filled(func, args, kwargs):
    """new_zeros/new_ones/new_empty/new_full(x, size, ...): a fresh tensor of the global `size`,
    replicated (every rank makes the whole tensor)."""
    x = args[0]
    local = func(x._local, *args[1:], **kwargs)
    spec = x._spec.with_([Replicate()] * len(x._spec.placements), list(local.shape),
                         _dtype_name(local.dtype))
    return DTensor(local, spec, x._mesh)


def _new_empty_strided(func, args, kwargs):
    """new_empty_strided(x, size, stride) (autograd's CopySlices makes the gradient of a tensor
    written through views with it; torch's decomposition gives a plain tensor): x's layout when
    `size` is x's shape (as empty_like: the gradient's copy into it stays local), else replicated
    (new_empty). A bridge tensor reports contiguous global strides (docs/PYTHON.md), whatever
    `stride` asks: its elements are uninitialized, and the strides it reports are the ones its
    views and as_strided read."""
    b = _bind(func, args, kwargs)
    x, size = b["self"], list(b["size"])
    options = {k: v for k, v in kwargs.items() if k not in ("size", "stride")}
    if size == list(x.shape):
        return _fill_like(aten.empty_like.default, (x,), options)
    return _new_filled(aten.new_empty.default, (x, size), options)


def _copy_(func, args, kwargs):
    """copy_(dst, src): src moved to dst's placements, then copied block to block. A plain src is
    the same on every rank (plain tensors mixed with bridge tensors are replicated; ATen's own
    kernels make some: linalg_matrix_power(x, 0) copies an eye into a clone of x), broadcast to
    dst's shape. A plain dst takes a replicated src's block (every rank holds the whole tensor:
    generate's beam search writes into buffers it made); a sharded or Partial src is refused, as
    its whole tensor needs a collective the caller should see."""
    dst, src = args[0], args[1]
    if type(dst) is not DTensor:
        if all(p.is_replicate() for p in src._spec.placements):
            return dst.copy_(src._local, **kwargs)
        raise DTensorError(f"bridge: aten.copy_: copying a bridge tensor {src._spec} that is not replicated "
                           f"into a plain {type(dst).__name__}; accepted: dst.copy_(src.full_tensor())")
    if type(src) is not DTensor:
        whole = src.expand(dst.shape).contiguous()
        src = DTensor(whole, dst._spec.with_([Replicate()] * len(dst._spec.placements), list(whole.shape),
                                             _dtype_name(whole.dtype)), dst._mesh)
    apart = func is not None and _view_apart(dst)  # _in_place writes its op's result through itself
    if src._spec.placements != dst._spec.placements:
        src = _moved(src, dst._spec.placements)
    dst._local.copy_(src._local, **kwargs)
    if apart:
        _write_to_base(func, dst)
    return dst


# _foreach_<op> arguments that are positional there and keyword-only in <op>.
_FOREACH_KEYWORD = {"addcdiv": "value", "addcmul": "value"}


def _foreach(name, in_place):
    """_foreach_<op>[_](lists..., scalars...) (torch.optim's foreach implementations,
    clip_grad_norm_(foreach=True)) as <op> per element, each through the bridge: list arguments
    are indexed, a Scalar[] or a 1-d scalars tensor gives each element its scalar, anything else is
    passed to every element."""
    op = {"norm": "linalg_vector_norm", "powsum": "linalg__powsum"}.get(name, name)
    # maximum and minimum have no in-place ATen op: the result is copied into the list's tensor;
    # with a number they are clamp_min / clamp_max (ATen's maximum takes tensors only)
    copy_back = in_place and not hasattr(aten, op + "_")
    packet = getattr(aten, op if copy_back or not in_place else op + "_")
    clamp_name = {"maximum": "clamp_min", "minimum": "clamp_max"}.get(name)
    clamp = getattr(aten, clamp_name + ("_" if in_place else "")) if clamp_name else None
    keyword = _FOREACH_KEYWORD.get(name)

    def handler(func, args, kwargs):
        n = len(args[0]) if isinstance(args[0], (list, tuple)) else len(args[1])
        rest, done = list(range(n)), {}
        if name in _FOREACH_BLOCKWISE:
            args, rest, done = _foreach_on_blocks(func, args, kwargs, n, in_place, name)
            n = len(rest)

        def pick(v, i):
            if isinstance(v, (list, tuple)) and len(v) == n:
                return v[i]
            if isinstance(v, torch.Tensor) and type(v) is not DTensor and v.dim() == 1 and v.numel() == n:
                return v[i].item()
            return v

        outs = []
        for i in range(n):
            a = [pick(v, i) for v in args]
            kw = {k: pick(v, i) for k, v in kwargs.items()}
            if keyword and len(a) == 4:
                kw[keyword] = a.pop()
            if name in ("norm", "powsum") and len(a) > 1:
                kw["ord"] = a.pop(1)
            if clamp and not isinstance(a[1], torch.Tensor):
                outs.append(clamp(*a, **kw))
                continue
            out = packet(*a, **kw)
            if copy_back:
                a[0].copy_(out)
            outs.append(out)
        if in_place:
            return None
        done.update(zip(rest, outs))  # by list position: on blocks, then per tensor
        return [done[k] for k in range(len(done))]

    return handler


# _foreach ops that act element by element: on tensors of one layout (the same placements and
# shape at each list position), torch's own _foreach kernel over the local blocks computes each
# block of the result, in one call instead of one engine call per tensor (torch.optim's foreach
# AdamW issues about ten of these per step).
_FOREACH_BLOCKWISE = frozenset({
    "add", "sub", "mul", "div", "addcmul", "addcdiv", "lerp", "sqrt", "rsqrt", "neg", "abs", "exp", "log",
    "reciprocal", "maximum", "minimum", "clamp_min", "clamp_max", "pow", "sign", "sigmoid", "tanh", "zero",
    "copy", "expm1", "log1p", "sin", "cos", "erf", "ceil", "floor", "round", "trunc", "frac"})
# Those that may take Partial(sum/avg) tensors: linear in their one tensor list (times a number).
_FOREACH_LINEAR = frozenset({"mul", "div", "neg", "zero"})


def _foreach_on_blocks(func, args, kwargs, n, in_place, name):
    """Runs `func` (a _foreach op of _FOREACH_BLOCKWISE) on the local blocks of the list positions
    whose tensors share one layout: bridge tensors on one mesh with equal placements and shapes, no
    Partial unless the op is linear in its one tensor list; a tensor passed whole (a 0-d scale) must
    be a replicated bridge tensor or a plain 0-d tensor. Returns the arguments restricted to the
    other positions (for the per-tensor path), those positions, and {position: output} of the done
    ones (out-of-place ops)."""
    everything = (args, list(range(n)), {})
    lists = [i for i, v in enumerate(args) if isinstance(v, (list, tuple)) and len(v) == n]
    tensor_lists = [i for i in lists if any(isinstance(e, torch.Tensor) for e in args[i])]
    whole = [v for i, v in enumerate(args) if i not in lists and isinstance(v, torch.Tensor)]
    whole += [v for v in kwargs.values() if isinstance(v, torch.Tensor)]
    if any(isinstance(v, (list, tuple)) for v in kwargs.values()):
        return everything
    for v in whole:  # a scale passed to every position
        if isinstance(v, DTensor):
            if any(not p.is_replicate() for p in v._spec.placements):
                return everything
        elif v.dim() != 0:
            return everything
    linear = name in _FOREACH_LINEAR and len(tensor_lists) == 1
    fast = []
    for k in range(n):
        ts = [args[i][k] for i in tensor_lists]
        if not isinstance(ts[0], DTensor) or not all(_aligned_with(t, ts[0]) for t in ts):
            continue
        first = ts[0]._spec
        if first.has_partial and not (linear and all(p.reduce_op in ("sum", "avg") for p in first.placements
                                                      if p.is_partial())):
            continue
        fast.append(k)
    if not fast:
        return everything
    fast_args = [[_block(v[k]) for k in fast] if i in lists else _block(v) for i, v in enumerate(args)]
    outs = func(*fast_args, **{k: _block(v) for k, v in kwargs.items()})
    done = {}
    if not in_place:
        done = {k: _like(block, args[tensor_lists[0]][k]) for k, block in zip(fast, outs)}
    taken = set(fast)
    rest = [k for k in range(n) if k not in taken]
    rest_args = tuple([v[k] for k in rest] if i in lists else v for i, v in enumerate(args))
    return rest_args, rest, done


def _fused_unscaled(func, args, kwargs):
    """A fused optimizer op's arguments by name, refused with AMP's grad_scale/found_inf."""
    b = _bind(func, args, kwargs)
    if b.get("grad_scale") is not None or b.get("found_inf") is not None:
        raise UnsupportedOpError(f"bridge: {func} with grad_scale/found_inf (AMP) is not supported; accepted: "
                                 f"grad_scale=None, found_inf=None")
    return b


def _fused_gradient(b, i, weight_decay):
    """The i-th gradient of a fused optimizer op's arguments `b` as the single-tensor algorithms use
    it: negated under maximize, plus weight_decay times the parameter (coupled decay; 0: none)."""
    grad = b["grads"][i]
    if b["maximize"]:
        grad = aten.neg.default(grad)
    return grad.add(b["self"][i], alpha=weight_decay) if weight_decay != 0 else grad


def _fused_adam(decoupled):
    """_fused_adam_ / _fused_adamw_ (torch.optim.Adam/AdamW(fused=True); lr a float or, .tensor_lr,
    a tensor) as their single-tensor algorithm (torch/optim/adam.py, _single_tensor_adam; weight
    decay added to the gradient, or decoupled: the parameter scaled), per parameter through the
    bridge: the same update, in the per-tensor ops' rounding. The steps are already counted (torch
    adds 1 before the fused call)."""

    def handler(func, args, kwargs):
        b = _fused_unscaled(func, args, kwargs)
        lr = float(b["lr"])
        beta1, beta2, wd, eps = b["beta1"], b["beta2"], b["weight_decay"], b["eps"]
        for i, p in enumerate(b["self"]):
            grad = _fused_gradient(b, i, 0 if decoupled else wd)
            if decoupled:
                p.mul_(1 - lr * wd)
            step = float(b["state_steps"][i])
            exp_avg, exp_avg_sq = b["exp_avgs"][i], b["exp_avg_sqs"][i]
            exp_avg.lerp_(grad, 1 - beta1)
            exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            step_size = lr / (1 - beta1 ** step)
            bias_correction2_sqrt = math.sqrt(1 - beta2 ** step)
            second = exp_avg_sq
            if b["amsgrad"]:
                b["max_exp_avg_sqs"][i].copy_(torch.maximum(b["max_exp_avg_sqs"][i], exp_avg_sq))
                second = b["max_exp_avg_sqs"][i]
            denom = (second.sqrt() / bias_correction2_sqrt).add_(eps)
            p.addcdiv_(exp_avg, denom, value=-step_size)
        return None

    return handler


def _fused_sgd_(func, args, kwargs):
    """_fused_sgd_ (torch.optim.SGD(fused=True)) as _single_tensor_sgd (torch/optim/sgd.py): on the
    first step the momentum buffer (torch's empty_like) takes the gradient; no buffers without
    momentum."""
    b = _fused_unscaled(func, args, kwargs)
    lr, wd, momentum, dampening = float(b["lr"]), b["weight_decay"], b["momentum"], b["dampening"]
    for i, p in enumerate(b["self"]):
        grad = _fused_gradient(b, i, wd)
        if momentum != 0:
            buf = b["momentum_buffer_list"][i]
            if b["is_first_step"]:
                buf.copy_(grad)
            else:
                buf.mul_(momentum).add_(grad, alpha=1 - dampening)
            grad = grad.add(buf, alpha=momentum) if b["nesterov"] else buf
        p.add_(grad, alpha=-lr)
    return None


def _fused_adagrad_(func, args, kwargs):
    """_fused_adagrad_ (torch.optim.Adagrad(fused=True)) as _single_tensor_adagrad
    (torch/optim/adagrad.py); the steps are already counted (torch adds 1 before the fused call)."""
    b = _fused_unscaled(func, args, kwargs)
    lr, lr_decay, wd, eps = float(b["lr"]), b["lr_decay"], b["weight_decay"], b["eps"]
    for i, p in enumerate(b["self"]):
        grad = _fused_gradient(b, i, wd)
        clr = lr / (1 + (float(b["state_steps"][i]) - 1) * lr_decay)
        state_sum = b["state_sums"][i]
        state_sum.addcmul_(grad, grad, value=1)
        p.addcdiv_(grad, state_sum.sqrt().add_(eps), value=-clr)
    return None


def _in_place(out_of_place):
    """x.op_(...) as x's block <- op(...) moved to x's placements (torch's add_ from AccumulateGrad)."""

    def handler(func, args, kwargs):
        apart = _view_apart(args[0])
        r = _dispatch_on(out_of_place, args, kwargs)
        _copy_(None, (args[0], r), {})
        if apart:
            _write_to_base(func, args[0])
        return args[0]

    return handler


def _in_place_view(out_of_place):
    """x.squeeze_(0), x.t_(), ... (ATen ops tagged inplace_view, e.g. from matmul's 1-d cases): x
    becomes the view, block and spec, and the wrapper's own sizes follow (the op run on the wrapper's
    metadata alone, as torch's return_and_correct_aliasing does); copying the view back into x, as
    for add_, would keep x's old shape."""
    def handler(func, args, kwargs):
        x = args[0]
        r = _dispatch_on(out_of_place, args, kwargs)
        x._local, x._spec = r._local, r._spec
        with torch.utils._mode_utils.no_dispatch():
            meta = torch._C._meta_in_tls_dispatch_include()
            torch._C._set_meta_in_tls_dispatch_include(True)
            try:
                func(*args, **kwargs)
            finally:
                torch._C._set_meta_in_tls_dispatch_include(meta)
        return x

    return handler


def _dispatch_on(func, args, kwargs):
    handler = _handlers.get(func)
    if handler is None:
        handler = _handlers[func] = _resolve(func)
    return handler(func, args, kwargs)


def _decomposed(qualified, decomp):
    def handler(func, args, kwargs):
        try:
            out = decomp(*args, **kwargs)
        except UnsupportedOpError as e:
            raise UnsupportedOpError(f"bridge: {qualified}, run as torch's decomposition: {e}") from e
        if out is NotImplemented:  # torch's decomposition declines these arguments
            shapes = [(tuple(a.shape), a._spec.placements) for a in args if type(a) is DTensor]
            raise UnsupportedOpError(f"bridge: {qualified} has no sharding rule in dtensor and torch's decomposition "
                                     f"does not take these arguments (inputs: {shapes})")
        return out

    return handler


# Element-by-element ATen ops that dtensor has no op for (torch.optim's AdamW and SGD use them): on
# tensors of one layout they run on the aligned local blocks as one ATen call, instead of their
# decomposition's several engine calls. In-place pointwise ops (torch.Tag.pointwise: mul_, add_,
# sqrt_, ...) take the same shortcut instead of the out-of-place op and a copy back.
_ELEMENTWISE_DECOMPOSED = frozenset({"lerp", "addcmul", "addcdiv"})


def _on_aligned_blocks(otherwise):
    """Handler: ATen on the local blocks when every tensor argument is a bridge tensor on one mesh
    with the output's shape and the same placements, none Partial (0-d replicated ones broadcast);
    `otherwise` for any other call. Outputs keep that layout; an in-place op returns its self."""
    def handler(func, args, kwargs):
        tensors = [v for v in list(args) + list(kwargs.values()) if isinstance(v, torch.Tensor)]
        first = args[0]
        if not isinstance(first, DTensor) or first._spec.has_partial:
            return otherwise(func, args, kwargs)
        for t in tensors:
            scale = (isinstance(t, DTensor) and t._mesh is first._mesh and t.dim() == 0
                     and all(p.is_replicate() for p in t._spec.placements))
            if not (_aligned_with(t, first) or scale):
                return otherwise(func, args, kwargs)
        if func._schema.name.endswith("_") and _view_apart(first):
            return otherwise(func, args, kwargs)  # _in_place: the write goes on to the base
        out = func(*[_block(v) for v in args], **{k: _block(v) for k, v in kwargs.items()})
        if func._schema.name.endswith("_") or out is first._local:
            return first
        return _like(out, first)

    return handler


def _moved_blocks(flat, placed):
    """Flattened arguments with each bridge tensor t replaced by its block under the placements
    placed(t) (moved there first where they differ); other values as they are."""
    out = []
    for v in flat:
        if isinstance(v, DTensor):
            want = list(placed(v))
            v = (v if list(v._spec.placements) == want else _moved(v, want))._local
        out.append(v)
    return out


def _wrapped_blocks(out, like, placements, shape_of=lambda block: block.shape):
    """torch's output(s) computed on blocks as bridge tensors on `like`'s mesh with `placements` and
    the global shape shape_of(block); values that are not tensors as they are."""
    def wrap(block):
        if not isinstance(block, torch.Tensor):
            return block
        spec = like._spec.with_(list(placements), list(shape_of(block)), _dtype_name(block.dtype))
        return DTensor(block, spec, like._mesh)

    return type(out)(wrap(o) for o in out) if isinstance(out, (list, tuple)) else wrap(out)


def _pointwise_on_blocks(func, args, kwargs):
    """An ATen op tagged pointwise that dtensor has no op for (special functions, polygamma, ...):
    torch's kernel on the blocks, laid out by the pointwise rule: the output takes the placements of
    the first bridge argument of its shape (Partial as Replicate: a pointwise function of a sum is
    not the sum of the function), and each tensor argument is moved to match it, a dim it broadcasts
    along replicated. Plain tensors with dims of their own make every argument replicated."""
    if any(not r.type.isSubtypeOf(torch._C.TensorType.get()) for r in func._schema.returns):
        # A Python value (is_nonzero, equal): the whole tensor's, not a block's.
        return _replicated(func, args, kwargs)
    flat, tree = tree_flatten((args, kwargs))
    tensors = [v for v in flat if isinstance(v, torch.Tensor)]
    first = next(v for v in tensors if isinstance(v, DTensor))
    shape = tuple(torch.broadcast_shapes(*[t.shape for t in tensors]))
    lead = next((v for v in tensors if isinstance(v, DTensor) and tuple(v.shape) == shape), None)
    if lead is None or any(not isinstance(v, DTensor) and v.dim() > 0 for v in tensors):
        target = [Replicate()] * len(first._spec.placements)
    else:
        target = [Replicate() if p.is_partial() else p for p in lead._spec.placements]

    def placed(t):
        out = []
        for p in target:
            d = p.dim - (len(shape) - t.dim()) if p.is_shard() else -1
            out.append(Shard(d) if d >= 0 and t.shape[d] == shape[p.dim] else Replicate())
        return out

    bargs, bkwargs = tree_unflatten(_moved_blocks(flat, placed), tree)
    return _wrapped_blocks(func(*bargs, **bkwargs), first, target, lambda block: shape)


# Linear algebra outside torch.linalg's namespace (whose ops all take batches of matrices
# [*, m, n], torch.linalg's documentation): the same batching.
_LEGACY_LINALG = frozenset({"cholesky_solve", "cholesky_inverse", "triangular_solve", "geqrf", "ormqr",
                            "lu_unpack", "cholesky", "linalg_solve_triangular"})


def _batched_matrices_on_blocks(func, args, kwargs):
    """A linear-algebra ATen op (torch.linalg's, which all take batches of matrices [*, m, n]):
    torch's kernel on the blocks with the leading batch dim sharded, every matrix whole. The batch
    dim shards only when every tensor argument has a batch dim (3 dims or more) of one size;
    otherwise (a matrix, a right-hand side vector, pivots of a single matrix) every argument is
    replicated and each rank computes the whole result. Outputs whose dim 0 is not the batch (an
    empty residuals tensor) are replicated results of replicated inputs only."""
    flat, tree = tree_flatten((args, kwargs))
    tensors = [v for v in flat if isinstance(v, torch.Tensor)]
    first = next(v for v in tensors if isinstance(v, DTensor))
    n = len(first._spec.placements)
    batch = tensors[0].shape[0] if tensors[0].dim() >= 3 else None
    if batch is not None and not all(t.dim() >= 3 and t.shape[0] == batch for t in tensors):
        batch = None
    if batch is not None:
        # The outputs' global shapes (torch's meta kernels; the same on every rank): each must
        # lead with the batch dim, else nothing shards.
        try:
            shapes = _global_shape(func, args, kwargs)
            shapes = shapes if shapes and isinstance(shapes[0], list) else [shapes]  # one output: its shape
            if not all(sh is not None and len(sh) >= 1 and sh[0] == batch for sh in shapes):
                batch = None
        except Exception:  # noqa: BLE001 - no meta kernel (or an output that is not a tensor): replicated
            batch = None
    if batch is not None and all(isinstance(t, DTensor) for t in tensors):
        target = _batch_shards(first)
    else:
        target = [Replicate()] * n
    bargs, bkwargs = tree_unflatten(_moved_blocks(flat, lambda t: target), tree)
    sharded = any(p.is_shard() for p in target)
    return _wrapped_blocks(func(*bargs, **bkwargs), first, target,
                           lambda block: [batch, *block.shape[1:]] if sharded else block.shape)


def _batch_dims_of(base):
    """How many leading dims of every tensor argument and output are independent samples for the
    resampling ops without a dtensor op: N and C (2) for the upsamplings, adaptive max pools and
    fractional max pools (whose random_samples [N, C, dims] place each plane's windows), N alone (1)
    for the grid samplers (grid has no C dim, and grid's gradient sums over C)."""
    name = base[:-len("_backward")] if base.endswith("_backward") else base
    if name.lstrip("_").startswith("upsample_") or name in (
            "adaptive_max_pool2d", "adaptive_max_pool3d", "fractional_max_pool2d", "fractional_max_pool3d"):
        return 2
    if name in ("grid_sampler_2d", "grid_sampler_3d"):
        return 1
    return 0


def _batch_dims_on_blocks(batch_dims, spatial, func, args, kwargs):
    """An upsampling, adaptive max pool or grid sampler (and its backward) on the blocks: the first
    `batch_dims` dims keep their Shards, every other dim is whole (each output element reads a
    window of its own sample's spatial dims); a global `input_size` argument (the backward's)
    gets the block's sizes there. An input without its batch dims (adaptive pooling of [C, H, W])
    is computed whole on every rank."""
    flat, tree = tree_flatten((args, kwargs))
    tensors = [v for v in flat if isinstance(v, torch.Tensor)]
    first = next(v for v in tensors if isinstance(v, DTensor))
    batched = tensors[0].dim() == 2 + spatial and all(isinstance(t, DTensor) for t in tensors)
    target = [p if batched and p.is_shard() and p.dim < batch_dims else Replicate() for p in first._spec.placements]
    blocks = _moved_blocks(flat, lambda t: target)
    lead_local = list(next(b for b, v in zip(blocks, flat) if v is tensors[0]).shape[:batch_dims])
    lead_global = list(tensors[0].shape[:batch_dims])
    empty = batched and 0 in lead_local
    if empty:
        # A rank whose block has no samples must not call the kernel (torch refuses empty inputs,
        # and a rank that raises alone leaves the others waiting in the next collective): it runs
        # one zero sample and keeps none of it.
        blocks = [torch.zeros([1 if d < batch_dims and b.shape[d] == 0 else b.shape[d] for d in range(b.dim())],
                              dtype=b.dtype) if isinstance(v, DTensor) else b for b, v in zip(blocks, flat)]
    bargs, bkwargs = tree_unflatten(blocks, tree)
    names = [a.name for a in func._schema.arguments]
    if "input_size" in names:
        i = names.index("input_size")
        lead_call = [max(k, 1) for k in lead_local] if empty else lead_local
        if i < len(bargs):
            bargs = list(bargs)
            bargs[i] = lead_call + list(bargs[i][batch_dims:])
        elif "input_size" in bkwargs:
            bkwargs = dict(bkwargs, input_size=lead_call + list(bkwargs["input_size"][batch_dims:]))
    out = func(*bargs, **bkwargs)
    if empty:  # none of the zero sample's outputs are kept
        kept = tuple(slice(0, k) for k in lead_local)
        out = type(out)(o[kept] if isinstance(o, torch.Tensor) else o for o in out) \
            if isinstance(out, (list, tuple)) else out[kept]
    return _wrapped_blocks(out, first, target,
                           lambda block: lead_global + list(block.shape[batch_dims:]) if batched else block.shape)


def _fractional_max_pool(spatial):
    """fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples [N, C, spatial]):
    per plane (_batch_dims_on_blocks), each (n, c)'s windows placed by its row of random_samples.
    A plain random_samples (F.fractional_max_pool2d draws one from each rank's torch generator when
    not given, and thread ranks share one generator) is rank 0's on every rank (a broadcast of
    N C spatial numbers: a Partial(sum) of rank 0's and zeros), so every rank pools the same windows."""
    def handler(func, args, kwargs):
        b = _bind(func, args, kwargs)
        x, samples = b["self"], b["random_samples"]
        if isinstance(x, DTensor) and not isinstance(samples, DTensor):
            n = len(x._spec.placements)
            mine = samples.contiguous() if x._mesh.get_coordinate() == [0] * n else torch.zeros_like(samples)
            spec = x._spec.with_([_dtensor.Partial("sum")] * n, list(samples.shape), _dtype_name(samples.dtype))
            b["random_samples"] = _moved(DTensor(mine, spec, x._mesh), [Replicate()] * n)
        return _batch_dims_on_blocks(2, spatial, func, (), b)

    return handler


def _unsupported(qualified):
    def handler(func, args, kwargs):
        if getattr(_fallback, "on", False):
            return _replicated(func, args, kwargs)
        shapes = [(tuple(a.shape), a._spec.placements) for a in args if type(a) is DTensor]
        raise UnsupportedOpError(
            f"bridge: {qualified} has no sharding rule in dtensor (inputs: {shapes}); accepted: the "
            f"ops of dtensor.ops.names() and the bridge's own (docs/PYTHON.md), or opt in to "
            f"replication with dtensor.bridge.allow_replicate_fallback()")

    return handler


def _replicated(func, args, kwargs):
    """allow_replicate_fallback: every sharded input made Replicate, torch's op on whole tensors."""
    flat, tree = tree_flatten((args, kwargs))  # a list argument's DTensors count too
    ref = next(v for v in flat if type(v) is DTensor)
    whole = [Replicate()] * len(ref._spec.placements)
    largs, lkwargs = tree_unflatten(_moved_blocks(flat, lambda t: whole), tree)
    return _wrapped_blocks(func(*largs, **lkwargs), ref, whole)


def _cat(func, args, kwargs):
    """cat(tensors, dim): ATen skips 1-d empty tensors whatever `dim` is (a legacy rule that
    transformers' empty KV caches rely on); the rest through the engine's cat."""
    b = _bind(func, args, kwargs)
    kept = [t for t in b["tensors"] if not (t.dim() == 1 and t.shape[0] == 0)]
    if not kept:  # only empties: a copy of the sharded one (dispatch came here for it)
        return aten.clone.default(next(t for t in b["tensors"] if type(t) is DTensor))
    if len(kept) < len(b["tensors"]):
        args, kwargs = (kept, b.get("dim", 0)), {}
    return _cat_engine()(func, args, kwargs)


@functools.lru_cache(maxsize=None)
def _cat_engine():
    return _engine("cat")


# ---- random numbers ----------------------------------------------------------------------------
#
# Draws for a sharded tensor must not depend on its layout: the mask of a replicated activation is
# the same on every rank, and a sharded one's blocks are the blocks of the mask the whole tensor
# would get. dtensor's Philox ops (ops/random/defs.cc) draw each block's slice of the whole
# tensor's draw from (the mesh's agreed seed, a per-call offset); every other random op of ATen is
# a pointwise transform of one such uniform or normal draw (inverse CDF: exponential, cauchy,
# geometric; affine: uniform, normal; a comparison: bernoulli with a tensor p), so it inherits the
# guarantee. torch's own mt19937 stream is never used for a DTensor: a random op with no handler
# here is refused (_without_rule), as its decomposition would draw plain tensors that differ per rank.

_rng = threading.local()  # per rank: run_threads' ranks are threads of one interpreter


def _philox_key(x):
    """(seed, offset) of this random call on x's mesh: the seed every rank shares (rank 0's
    torch.initial_seed(), agreed on at first use by an all-reduce(max) of (seed if rank 0 else 0), as
    PyTorch DTensor's RNG tracker syncs its seed) and an offset advanced by one per call (every rank
    makes the same calls in the same order). The draw itself is dtensor's Philox op
    (ops/random/defs.cc): each rank draws only its block, the values one device would draw there."""
    key = id(x._mesh)
    seeds = getattr(_rng, "seeds", None)
    if seeds is None:
        seeds = _rng.seeds = {}
        _rng.calls = 0
    if key not in seeds:
        n = len(x._spec.placements)
        mine = torch.tensor([torch.initial_seed() % (1 << 62)], dtype=torch.int64)
        if x._mesh.get_coordinate() != [0] * n:
            mine.zero_()
        spec = x._spec.with_([_dtensor.Partial("max")] * n, [1], "int64")
        _, agreed = _b.redistribute(spec, mine, [Replicate()] * n)
        seeds[key] = int(agreed[0])
    _rng.calls += 1
    return seeds[key], _rng.calls


def _laid_out_as(like, drawn):
    """A draw moved to `like`'s placements, Partial ones made Replicate (a draw of a Partial
    tensor is Replicate already; the engine keeps every Shard where it is, so this rarely moves)."""
    placements = [Replicate() if p.is_partial() else p for p in like._spec.placements]
    return drawn if list(drawn._spec.placements) == placements else _moved(drawn, placements)


def _bernoulli_(func, args, kwargs):
    """bernoulli_(self, p) (eager dropout on CPU: empty_like(x).bernoulli_(1 - p)): self's blocks
    become its blocks of one Philox draw of the whole tensor (philox_bernoulli)."""
    b = _bind(func, args, kwargs)
    x = b["self"]
    (drawn,) = _b.prepare("philox_bernoulli", *_philox_bernoulli_adapt(args, kwargs)).run()
    drawn = _laid_out_as(x, drawn)
    if drawn._spec.placements != x._spec.placements:  # self was Partial: it is Replicate there now
        x._spec = drawn._spec
    x._local.copy_(drawn._local)
    return x


def _in_place_result(func, x, out):
    """An ATen op's result: `out` copied into x for the in-place form (a name ending in _), else out."""
    return _copy_(None, (x, out), {}) if func._schema.name.endswith("_") else out


def _no_generator(func, x, b):
    if b.get("generator") is not None:
        raise UnsupportedOpError(f"bridge: {func} with an explicit generator on a sharded tensor {x._spec}; "
                                 f"accepted: generator=None (dtensor seeds per mesh)")


def _draw(x, normal=False):
    """A float64 DTensor of x's shape laid out as x (Partial dims Replicate): U[0, 1) or N(0, 1),
    each block its slice of the whole tensor's Philox draw."""
    seed, offset = _philox_key(x)
    (drawn,) = _b.prepare("philox_randn_like" if normal else "philox_rand_like",
                          (x, seed, offset), {"dtype": "float64"}).run()
    return _laid_out_as(x, drawn)


def _check_floating(func, x):
    if not x.dtype.is_floating_point:
        raise UnsupportedOpError(f"bridge: {func} of {x.dtype} {x._spec}; accepted: a floating dtype (as ATen)")


def _check_parameter(func, x, name, ok, value, accepted):
    if not ok:
        raise DTensorError(f"bridge: {func} of {x._spec}: {name} = {value}; accepted: {accepted}")


def _continuous(func, args, kwargs):
    """uniform, exponential, cauchy, log_normal, normal_ (in place; the in-place forms copy the
    result into self): the inverse CDF (or affine map) of one U[0, 1) or N(0, 1) draw, in float64,
    cast to self's dtype. Parameter checks as ATen's (torch/csrc: check_uniform_bounds, ...)."""
    b = _bind(func, args, kwargs)
    x, name = b["self"], func._schema.name.split("::")[1].replace("_functional", "").rstrip("_")
    _no_generator(func, x, b)
    _check_floating(func, x)
    if name == "uniform":
        lo, hi = float(b.get("from", 0.0)), float(b.get("to", 1.0))
        _check_parameter(func, x, "from, to", lo <= hi, (lo, hi), "from <= to")
        out = _draw(x) * (hi - lo) + lo
    elif name == "exponential":
        lambd = float(b.get("lambd", 1.0))
        _check_parameter(func, x, "lambd", lambd > 0, lambd, "lambd > 0")
        out = torch.log1p(-_draw(x)) * (-1.0 / lambd)  # U in [0, 1): 1 - U in (0, 1], finite
    elif name == "cauchy":
        median, sigma = float(b.get("median", 0.0)), float(b.get("sigma", 1.0))
        _check_parameter(func, x, "sigma", sigma > 0, sigma, "sigma > 0")
        out = torch.tan((_draw(x) - 0.5) * math.pi) * sigma + median
    else:  # normal_, log_normal
        mean, std = (float(b.get("mean", 0.0)), float(b.get("std", 1.0))) if name == "normal" else (
            float(b.get("mean", 1.0)), float(b.get("std", 2.0)))
        _check_parameter(func, x, "std", std >= 0 if name == "normal" else std > 0, std,
                         "std >= 0" if name == "normal" else "std > 0")
        out = _draw(x, normal=True) * std + mean
        if name == "log_normal":
            out = torch.exp(out)
    out = out.to(x.dtype)
    return _in_place_result(func, x, out)


def _discrete(func, args, kwargs):
    """geometric(p), random(from, to) / random(to) / random(), randint_like(high) /
    randint_like(low, high): floor or ceil of a transformed U[0, 1) draw in float64 (exact for
    ranges up to 2^53), in self's dtype."""
    b = _bind(func, args, kwargs)
    x, name = b["self"], func._schema.name.split("::")[1].rstrip("_")
    _no_generator(func, x, b)
    _check_same_device(name, x, b.get("device"))
    dtype = b.get("dtype") or x.dtype
    u = _draw(x)
    if name == "geometric":
        p = float(b["p"])
        _check_parameter(func, x, "p", 0 < p < 1, p, "0 < p < 1")
        out = torch.clamp_min(torch.ceil(torch.log1p(-u) / math.log1p(-p)), 1.0)
    else:
        lo, hi = int(b.get("from", b.get("low", 0))), b.get("to", b.get("high"))
        if isinstance(hi, torch.Tensor):  # randint_like.Tensor: a 0-d high, the same on every rank
            hi = hi.item()
        if hi is None:  # random(): [0, 2^digits] for floating dtypes (ATen's), [0, 1] for bool
            digits = {torch.bool: 1, torch.float64: 53, torch.float32: 24, torch.bfloat16: 8, torch.float16: 11}.get(dtype)
            if digits is None:
                raise UnsupportedOpError(f"bridge: {func} of {dtype} {x._spec} without `to`: its range is the "
                                         f"dtype's (2^63 values for int64), beyond a float64 draw's 2^53; accepted: "
                                         f"an explicit to <= from + 2^53")
            hi = 2 if dtype == torch.bool else (1 << digits) + 1
        hi = int(hi)
        _check_parameter(func, x, "[from, to)", lo < hi, (lo, hi), "from < to")
        _check_parameter(func, x, "to - from", hi - lo <= 1 << 53, hi - lo, "at most 2^53 (a float64 draw's resolution)")
        out = torch.clamp_max(torch.floor(u * float(hi - lo)), float(hi - lo - 1)) + float(lo)
    out = out.to(dtype)
    return _in_place_result(func, x, out)


def _normal(func, args, kwargs):
    """normal(mean, std) with a tensor mean and/or std: mean + std * N(0, 1), the draw laid out as
    the broadcast result; a negative std is refused as ATen refuses it (a reduction over std)."""
    b = _bind(func, args, kwargs)
    mean, std = b["mean"], b.get("std", 1.0)
    x = mean if isinstance(mean, DTensor) else std
    _no_generator(func, x, b)
    if isinstance(std, torch.Tensor):
        _check_parameter(func, x, "std", not bool((std < 0).any()), "a negative element", "std >= 0")
    else:
        _check_parameter(func, x, "std", std >= 0, std, "std >= 0")
    shaped = next(t for t in torch.broadcast_tensors(*[t for t in (mean, std) if isinstance(t, torch.Tensor)])
                  if isinstance(t, DTensor))
    dtype = (mean if isinstance(mean, torch.Tensor) else std).dtype
    return (_draw(shaped, normal=True) * std + mean).to(dtype)


def _bernoulli_tensor(func, args, kwargs):
    """bernoulli(self) (self the probabilities) and bernoulli(self, p: Tensor): U < p, in self's
    dtype; bernoulli_(self, p: Tensor) writes it into self."""
    b = _bind(func, args, kwargs)
    x = b["self"]
    _no_generator(func, x, b)
    p = b.get("p", 0.5 if func._schema.name.endswith("_") else x)  # bernoulli(self): self is p
    if not isinstance(p, torch.Tensor):  # bernoulli_.float
        return _bernoulli_(func, args, kwargs)
    _check_parameter(func, x, "p", bool(((p >= 0) & (p <= 1)).all()), "an element outside [0, 1]", "0 <= p <= 1")
    out = (_draw(x) < p).to(x.dtype)
    return _in_place_result(func, x, out)


def _multinomial(func, args, kwargs):
    """multinomial(self [C] or [N, C], num_samples, replacement): each row's categories whole (its
    other dims keep their Shards), from one Philox draw laid out as the output (without
    replacement: keys log(U) / p, the num_samples largest, Efraimidis and Spirakis' weighted
    sampling; with: the inverse CDF of U times the row's total). ATen's checks on p: finite,
    non-negative, a positive total per row, enough positive categories without replacement."""
    b = _bind(func, args, kwargs)
    x, n, replacement = b["self"], int(b["num_samples"]), b.get("replacement", False)
    _no_generator(func, x, b)
    _check_floating(func, x)
    c = x.shape[-1]
    _check_parameter(func, x, "self", x.dim() in (1, 2) and c > 0, tuple(x.shape), "a [C] or [N, C] tensor, C >= 1")
    _check_parameter(func, x, "num_samples", n > 0 and (replacement or n <= c), n,
                     f"1 to {c} without replacement, >= 1 with")
    bad = (x < 0).any() | ~torch.isfinite(x).all() | (x.sum(-1) <= 0).any()
    if not replacement:
        bad = bad | ((x > 0).sum(-1) < n).any()
    _check_parameter(func, x, "self", not bool(bad), "a row with a negative, infinite or NaN probability, no "
                     "positive total, or fewer positive categories than samples", "a valid distribution per row")
    rows = [p if p.is_shard() and p.dim % x.dim() != x.dim() - 1 else Replicate() for p in x._spec.placements]
    p = x if list(x._spec.placements) == rows else _moved(x, rows)
    if not replacement:
        keys = torch.log(_draw(p)) / p.to(torch.float64)  # p = 0: -inf, never among the largest
        return torch.topk(keys, n, dim=-1).indices
    template = p.narrow(-1, 0, 1).expand(*p.shape[:-1], n)  # laid out as the rows, n draws each
    cdf = torch.cumsum(p.to(torch.float64), -1)
    u = _draw(template) * cdf.narrow(-1, c - 1, 1)
    return torch.clamp_max(torch.searchsorted(cdf, u, right=True), c - 1)


def _rrelu_with_noise(func, args, kwargs):
    """rrelu_with_noise(self, noise, lower, upper, training) (F.rrelu): in training each element
    <= 0 is scaled by a U[lower, upper) draw, which noise records (1 elsewhere), as ATen; else
    leaky_relu with slope (lower + upper) / 2 and noise untouched."""
    b = _bind(func, args, kwargs)
    x, noise = b["self"], b["noise"]
    lower, upper = float(b.get("lower", 0.125)), float(b.get("upper", 1.0 / 3.0))
    _no_generator(func, x, b)
    _check_floating(func, x)
    if b.get("training", False):
        r = (_draw(x) * (upper - lower) + lower).to(x.dtype)
        noise.copy_(torch.where(x <= 0, r, torch.ones_like(r)))
        out = x * noise
    else:
        out = aten.leaky_relu.default(x, (lower + upper) / 2)
    return _in_place_result(func, x, out)


def _rrelu_with_noise_backward(func, args, kwargs):
    """ATen's: grad * noise in training (when upper - lower > 1e-6), else leaky_relu's backward."""
    b = _bind(func, args, kwargs)
    lower, upper = float(b["lower"]), float(b["upper"])
    if b["training"] and upper - lower > 1e-6:
        return b["grad_output"] * b["noise"]
    return aten.leaky_relu_backward.default(b["grad_output"], b["self"], (lower + upper) / 2, b["self_is_result"])


# ---- ops computed on blocks with some dims whole ----------------------------------------------


def _kept(x, whole=(), partial_passes=False):
    """x's placements with the Shards of dims in `whole` made Replicate, and its Partials too unless
    the op is linear in x (partial_passes)."""
    return [p if (p.is_shard() and p.dim not in whole) or (p.is_partial() and partial_passes) else Replicate()
            for p in x._spec.placements]


def _batch_shards(x):
    """x's placements with only its Shards of dim 0 (the batch, the points) kept."""
    return _kept(x, range(1, x.dim()))


def _summed_where_sharded(placements):
    """A result each rank computed from its block of an input laid out as `placements`: a
    Partial(sum) piece on the mesh dims the input is sharded on, replicated on the others."""
    return [_dtensor.Partial("sum") if p.is_shard() else Replicate() for p in placements]


def _global_shape(func, args, kwargs):
    """The op's output shape(s) for the global shapes of its arguments (torch's meta kernel)."""
    flat, tree = tree_flatten((args, kwargs))
    meta = [torch.empty(v.shape, dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v for v in flat]
    margs, mkwargs = tree_unflatten(meta, tree)
    out = func(*margs, **mkwargs)
    return [None if o is None else list(o.shape) for o in out] if isinstance(out, (list, tuple)) else list(out.shape)


def _histc(func, args, kwargs):
    """histc(self, bins, min, max): each block's histogram over one range, summed (Partial(sum) over
    the mesh dims self is sharded on). ATen's default range (min = max) is the data's: a global
    min and max first, widened by 1 each side when they are equal (ATen's rule)."""
    b = _bind(func, args, kwargs)
    x, bins = b["self"], b.get("bins", 100)
    lo, hi = float(b.get("min", 0)), float(b.get("max", 0))
    if lo == hi and x.numel() > 0:
        lo, hi = float(aten.min.default(x)), float(aten.max.default(x))
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    keep = _kept(x)
    (block,) = _moved_blocks([x], lambda t: keep)
    return _wrapped_blocks(aten.histc.default(block, bins, lo, hi), x,
                           _summed_where_sharded(keep))


def _histogram(func, args, kwargs):
    """histogram(self, bins, *, range, weight, density) -> (hist, bin_edges): the edges torch gives
    the data's range (a global min and max first when no range is given; torch's own edges for those
    two values, its rule for equal ones included) or the edges given; each block's counts (weight
    sums) over them summed as Partial(sum) over the mesh dims self is sharded on, weight laid out as
    self; with density, divided by the total and the bins' widths. bin_edges replicated."""
    b = _bind(func, args, kwargs)
    x, bins, weight = b["self"], b["bins"], b.get("weight")
    if isinstance(bins, torch.Tensor):  # bins_tensor: the edges given, whole on every rank
        edges = bins.full_tensor() if isinstance(bins, DTensor) else bins
    else:
        rng = b.get("range")
        if rng is None:
            ends = [float(aten.min.default(x)), float(aten.max.default(x))] if x.numel() > 0 else []
            edges = torch.histogram(torch.tensor(ends, dtype=x.dtype), bins)[1]
        else:
            edges = torch.histogram(torch.empty(0, dtype=x.dtype), bins, range=list(rng))[1]
    keep = _kept(x)
    flat, tree = tree_flatten(([x, weight], {}))
    blocks = _moved_blocks(flat, lambda t: keep)
    block, wblock = tree_unflatten(blocks, tree)[0]
    hist = aten.histogram.bins_tensor(block, edges, weight=wblock)[0]
    n = len(keep)
    hist = _wrapped_blocks(hist, x, _summed_where_sharded(keep))
    edges = _wrapped_blocks(edges.contiguous(), x, [Replicate()] * n)
    if b.get("density", False):  # the engine's division sums the Partial pieces first
        hist = hist / (hist.sum() * torch.diff(edges))
    return hist, edges


def _histogramdd_edges(x, bins, rng):
    """torch's edges per dim of the [N, D] points x (bins: ints): computed by torch from each dim's
    global min and max (or the range), which is all its rule reads."""
    if rng is None and x.numel() > 0:
        ends = torch.stack([aten.amin.default(x, [0]).full_tensor(), aten.amax.default(x, [0]).full_tensor()])
    else:
        ends = torch.empty(0, x.shape[-1], dtype=x.dtype)
    return aten._histogramdd_bin_edges.default(ends, list(bins), range=rng)


def _histogramdd(func, args, kwargs):
    """histogramdd's parts (_histogramdd_bin_edges, _from_bin_cts, _from_bin_tensors): edges from
    global per-dim ranges (replicated), each block's counts or weight sums over them as Partial(sum)
    over the mesh dims the points are sharded on (the point dim's Shards kept, each point whole);
    density divided once summed."""
    b = _bind(func, args, kwargs)
    name = func._schema.name.split("::")[1]
    x = b["self"]
    pts = x.reshape(-1, x.shape[-1])
    whole = [Replicate()] * len(x._spec.placements)
    if name == "_histogramdd_bin_edges":
        return [_wrapped_blocks(e.contiguous(), x, whole) for e in _histogramdd_edges(pts, b["bins"], b.get("range"))]
    bins = b["bins"]
    edges = _histogramdd_edges(pts, bins, b.get("range")) if name == "_histogramdd_from_bin_cts" else \
        [e.full_tensor() if isinstance(e, DTensor) else e for e in bins]
    keep = _batch_shards(pts)
    weight = b.get("weight")
    flat, tree = tree_flatten(([pts, None if weight is None else weight.reshape(-1)], {}))
    block, wblock = tree_unflatten(_moved_blocks(flat, lambda t: keep), tree)[0]
    hist = aten._histogramdd_from_bin_tensors.default(block, edges, weight=wblock)
    hist = _wrapped_blocks(hist, x, _summed_where_sharded(keep))
    if b.get("density", False):  # counts / (total x each bin's volume), as torch normalizes
        volume = None
        for d, e in enumerate(edges):
            w = torch.diff(e).reshape([-1 if k == d else 1 for k in range(len(edges))])
            volume = w if volume is None else volume * w
        hist = hist / (hist.sum() * _wrapped_blocks(volume.contiguous(), x, whole))
    return hist


def _column_parallel_bag(func, args, kwargs):
    """_embedding_bag's weight gradients (the forward is a registered op): the embedding dim's Shards of
    grad kept, every other tensor whole (indices, offsets, bags);
    each rank reduces its columns of every bag. The column-laid outputs: the embeddings and, for
    mode max, the per-column argmax; the bag bookkeeping is replicated. per-sample weights'
    gradient sums over the columns: Partial(sum) over the mesh dims the columns are sharded on."""
    b = _bind(func, args, kwargs)
    name = func._schema.name.split("::")[1]
    if b.get("sparse", False):
        raise UnsupportedOpError(f"bridge: {func} with sparse=True (a sparse gradient); accepted: sparse=False")
    lead = b["weight"] if "weight" in b and not name.endswith("per_sample_weights_backward") else b["grad"]
    columns = [p if p.is_shard() and p.dim % 2 == 1 else Replicate() for p in lead._spec.placements]
    laid = [lead] + [b[k] for k in ("maximum_indices", "grad", "weight") if isinstance(b.get(k), DTensor)
                     and b[k].dim() == 2 and b[k] is not lead]
    flat, tree = tree_flatten((args, kwargs))
    bargs, bkwargs = tree_unflatten(_moved_blocks(
        flat, lambda t: columns if any(t is y for y in laid) else [Replicate()] * len(columns)), tree)
    shapes = _global_shape(func, args, kwargs)
    out = func(*bargs, **bkwargs)
    whole = [Replicate()] * len(columns)
    if name.endswith("per_sample_weights_backward"):
        return _wrapped_blocks(out, lead, _summed_where_sharded(columns),
                               lambda block: shapes)
    if isinstance(out, (list, tuple)):  # the forward: (output, offset2bag, bag_size, maximum_indices)
        by_column = {0} | ({3} if b.get("mode", 0) == 2 else set())
        return tuple(_wrapped_blocks(o, lead, columns if k in by_column else whole, lambda block, s=s: s)
                     for k, (o, s) in enumerate(zip(out, shapes)))
    return _wrapped_blocks(out, lead, columns, lambda block: shapes)


def _trilinear(func, args, kwargs):
    """_trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim) (F.bilinear's body, and
    its own gradients): each input unsqueezed at its expand dims in increasing order, the three
    multiplied with broadcasting and summed over sumdim, as ATen defines it (unroll_dim only picks
    ATen's loop), through the engine's mul and sum."""
    b = _bind(func, args, kwargs)

    def expanded(t, dims):
        for d in sorted(dims):
            t = t.unsqueeze(d)
        return t

    prod = expanded(b["i1"], b["expand1"]) * expanded(b["i2"], b["expand2"]) * expanded(b["i3"], b["expand3"])
    return prod.sum(list(b["sumdim"])) if len(b["sumdim"]) else prod


def _elementwise_in(name, whole_when=lambda b: True):
    """An op elementwise in argument `name` that reads its other tensors whole (isin's
    test_elements, searchsorted's 1-d sorted_sequence): those replicated, `name` keeps its Shards
    (a Partial made Replicate), the output laid out as it. When whole_when(bound arguments) is
    False (an N-d sorted_sequence pairs rows with self's), or `name` is a number, it runs whole."""
    def handler(func, args, kwargs):
        b = _bind(func, args, kwargs)
        x = b.get(name)
        if not isinstance(x, DTensor) or not whole_when(b):
            return _replicated(func, args, kwargs)
        keep = _kept(x)
        flat, tree = tree_flatten((args, kwargs))
        blocks = _moved_blocks(flat, lambda t: keep if t is x else [Replicate()] * len(keep))
        bargs, bkwargs = tree_unflatten(blocks, tree)
        return _wrapped_blocks(func(*bargs, **bkwargs), x, keep, lambda block: x.shape)

    return handler


def _index_reduce(func, args, kwargs):
    """index_reduce(self, dim, index, source, reduce, include_self) is scatter_reduce with the index
    spread along source's other dims: source's slice k along dim goes to self's slice index[k]."""
    b = _bind(func, args, kwargs)
    x, index, source = b["self"], b["index"], b["source"]
    dim = b["dim"] % max(x.dim(), 1)
    if source.dim() > 0:
        index = index.reshape([-1 if d == dim else 1 for d in range(source.dim())]).expand(source.shape)
    return aten.scatter_reduce.two(x, dim, index, source, b["reduce"], include_self=b.get("include_self", True))


_SCATTER_REDUCE = {"add": "sum", "multiply": "prod"}


def _scatter_reduce_form(func, args, kwargs):
    """scatter(self, dim, index, src or value, reduce="add" / "multiply") is scatter_reduce with sum /
    prod including self (a value is a src of index's shape filled with it)."""
    b = _bind(func, args, kwargs)
    x, index, reduce = b["self"], b["index"], b["reduce"]
    if reduce not in _SCATTER_REDUCE:
        raise DTensorError(f"bridge: {func} of {x._spec}: reduce = {reduce!r}; accepted: 'add', 'multiply'")
    src = b["src"] if "src" in b else aten.full_like.default(index, b["value"], dtype=x.dtype)
    return aten.scatter_reduce.two(x, b["dim"], index, src, _SCATTER_REDUCE[reduce], include_self=True)


def _addbmm(func, args, kwargs):
    """addbmm(self, batch1, batch2, beta, alpha) = beta * self + alpha * sum_b batch1[b] @ batch2[b]
    (bmm then a sum over the batch dim; self ignored when beta = 0, as ATen)."""
    b = _bind(func, args, kwargs)
    beta, alpha = b.get("beta", 1), b.get("alpha", 1)
    out = aten.sum.dim_IntList(aten.bmm.default(b["batch1"], b["batch2"]), [0])
    if alpha != 1:
        out = aten.mul.Tensor(out, alpha)
    return out if beta == 0 else aten.add.Tensor(out, b["self"], alpha=beta)


def _along_dim(dim_arg, partial_passes=False, main="self", aligned=()):
    """An op that reads whole lines along one dim of `main` (mode, unfold, segment_reduce): that dim
    whole, the other Shards kept (a Partial too when the op is linear), the `aligned` tensors (dims
    matching main's) laid out alike, any other tensor replicated; torch's kernel on the blocks. The
    output's Shards follow torch's own output shape (a reduced dim without keepdim shifts the later
    ones)."""
    def handler(func, args, kwargs):
        b = _bind(func, args, kwargs)
        x = b[main]
        if x.dim() == 0:
            return _replicated(func, args, kwargs)
        dim = b.get(dim_arg, -1 if dim_arg == "dim" else 0) % x.dim()
        keep = _kept(x, {dim}, partial_passes(b) if callable(partial_passes) else partial_passes)
        laid = [x] + [b[a] for a in aligned if isinstance(b.get(a), DTensor)]
        flat, tree = tree_flatten((args, kwargs))
        bargs, bkwargs = tree_unflatten(_moved_blocks(
            flat, lambda t: keep if any(t is y for y in laid) else [Replicate()] * len(keep)), tree)
        shapes = _global_shape(func, args, kwargs)
        out = func(*bargs, **bkwargs)
        dropped = len(shapes[0] if isinstance(out, (list, tuple)) else shapes) < x.dim()
        placed = [_dtensor.Shard(p.dim - 1) if p.is_shard() and dropped and p.dim > dim else p for p in keep]
        if isinstance(out, (list, tuple)):
            return tuple(_wrapped_blocks(o, x, placed, lambda block, s=s: s) for o, s in zip(out, shapes))
        return _wrapped_blocks(out, x, placed, lambda block: shapes)

    return handler


def _linear_segment_sum(b):
    return b["reduce"] == "sum" and not b.get("initial")


def _unfold_backward(func, args, kwargs):
    """unfold_backward(grad_in, input_sizes, dim, size, step): grad_in's dim and window dim whole,
    its other Shards (and a Partial: the op is linear) kept, input_sizes given the blocks' sizes."""
    b = _bind(func, args, kwargs)
    g, sizes, dim = b["grad_in"], list(b["input_sizes"]), b["dim"] % max(len(b["input_sizes"]), 1)
    keep = _kept(g, {dim, g.dim() - 1}, partial_passes=True)
    (block,) = _moved_blocks([g], lambda t: keep)
    local = [block.shape[d] if d != dim else n for d, n in enumerate(sizes)]
    return _wrapped_blocks(func(block, local, dim, b["size"], b["step"]), g, keep, lambda out: sizes)


def _batch_sharded_conv(b):
    """A transposed convolution's (or its backward's) call on the blocks: input and grad_output
    keep the input's batch-dim Shards, weight and any bias whole. Returns (keyword arguments of
    the blocks, the kept placements, the input)."""
    x = b["input"]
    keep = _batch_shards(x)
    flat, tree = tree_flatten(((), b))
    blocks = _moved_blocks(flat, lambda t: keep if t is x or t is b.get("grad_output") else [Replicate()] * len(keep))
    return tree_unflatten(blocks, tree)[1], keep, x


def _convolution(engine):
    """convolution: dtensor's op (its rules and kernel), except transposed (conv_transpose1d/2d/3d),
    which dtensor's convolution lacks: torch's kernel on the blocks with the input's batch-dim
    Shards kept (each sample's output reads only that sample) and weight and bias whole. (Every
    convolution takes this Python path, not the native dispatch: microseconds against a kernel's
    milliseconds.)"""
    def handler(func, args, kwargs):
        b = _bind(func, args, kwargs)
        if not b.get("transposed", False):
            return engine(func, args, kwargs)
        shape = _global_shape(func, args, kwargs)
        blocks, keep, x = _batch_sharded_conv(b)
        return _wrapped_blocks(func(**blocks), x, keep, lambda block: shape)

    return handler


def _convolution_backward(masked):
    """convolution_backward: dtensor's op (masked gradients None), except transposed: torch's kernel
    on the blocks, the batch dim's Shards of input and grad_output kept; grad_input laid out as
    input, grad_weight and grad_bias each rank's samples' share: Partial(sum) over the mesh dims the
    batch is sharded on."""
    def handler(func, args, kwargs):
        b = _bind(func, args, kwargs)
        if not b.get("transposed", False):
            return masked(func, args, kwargs)
        shapes = _global_shape(func, args, kwargs)
        blocks, keep, x = _batch_sharded_conv(b)
        summed = _summed_where_sharded(keep)
        outs = func(**blocks)
        return tuple(None if o is None else _wrapped_blocks(o, x, keep if k == 0 else summed, lambda block, s=s: s)
                     for k, (o, s) in enumerate(zip(outs, shapes)))

    return handler


def _storage_order_view(v):
    """Whether bridge view v holds its base's elements in the base's order (unsqueeze, view or
    reshape of the whole base: ATen's stft unsqueezes a 1-d signal before as_strided): then torch's
    view is contiguous at offset 0 over the base's storage, and sizes and strides address the same
    elements in the view's own contiguous layout. Decided by torch's view replay (v._view_func) on
    the base's element positions, a plain tensor: every rank decides alike without communication."""
    base = v._base
    if base is None or base.numel() != v.numel():
        return False
    try:
        where = v._view_func(torch.arange(base.numel(), dtype=torch.int64).reshape(base.shape))
    except Exception:  # noqa: BLE001 - no replay of this view: not known to be in order
        return False
    return tuple(where.shape) == tuple(v.shape) and bool(
        torch.equal(where.reshape(-1), torch.arange(v.numel(), dtype=torch.int64)))


def _refuse_strided_view(func, args, kwargs):
    """A bridge view does not share its base's storage (its strides and offset are its own
    contiguous ones), so sizes and strides would address other elements than torch's: refused,
    unless the view holds the base's elements in storage order (_storage_order_view)."""
    for v in tree_flatten((args, kwargs))[0]:
        if isinstance(v, DTensor) and v._is_view() and not _storage_order_view(v):
            raise UnsupportedOpError(f"bridge: {func} of a view {v._spec}: a bridge view does not share its "
                                     f"base's storage, so its strides address other elements; accepted: a "
                                     f"tensor that is not a view (.clone() it first)")


def _whole_strided(func, args, kwargs):
    """as_strided_copy, as_strided_scatter: sizes and strides address the tensor's storage, which
    for a bridge tensor that is not a view is its whole contiguous layout: every input is made
    Replicate and torch's op runs on the whole blocks. A view is refused (_refuse_strided_view)."""
    _refuse_strided_view(func, args, kwargs)
    flat, tree = tree_flatten((args, kwargs))
    ref = next(v for v in flat if type(v) is DTensor)
    whole = [Replicate()] * len(ref._spec.placements)
    largs, lkwargs = tree_unflatten(_moved_blocks(flat, lambda t: whole), tree)
    return _wrapped_blocks(func(*largs, **lkwargs), ref, whole)


def _as_strided(func, args, kwargs):
    """as_strided: dtensor's op (ops/strided/: the whole tensor, Partial passing), a view refused
    (_refuse_strided_view)."""
    _refuse_strided_view(func, args, kwargs)
    return _engine("as_strided")(func, args, kwargs)


def _resize_(func, args, kwargs):
    """resize_(self, size): dtensor's op (ops/strided/: self's first elements, zeros where it
    grows), then self becomes the result as an in-place view op does (_in_place_view); a view
    refused (_refuse_strided_view), a memory format other than contiguous refused."""
    fmt = _bind(func, args, kwargs).get("memory_format")
    if fmt not in (None, torch.contiguous_format):
        raise UnsupportedOpError(f"bridge: {func} with memory_format={fmt}; accepted: None or torch.contiguous_format")
    _refuse_strided_view(func, args, kwargs)
    return _in_place_view(aten.resize.default)(func, args[:2], {})


def _allclose(func, args, kwargs):
    """allclose(self, other, rtol, atol, equal_nan): isclose through the engine, then all of it
    (a global reduction; every rank gets the same bool)."""
    b = _bind(func, args, kwargs)
    close = aten.isclose.default(b["self"], b["other"], b.get("rtol", 1e-5), b.get("atol", 1e-8), b.get("equal_nan", False))
    return bool(aten.all.default(close))


def _identity_on_empty(op, largest):
    """amin / amax on a block: ATen refuses to reduce an empty dim, but a rank's block may be empty
    where the tensor is not (uneven shards give some ranks nothing): its piece of the Partial
    min / max is then the reduction's identity (+inf / -inf, an integer dtype's extreme), so every
    rank takes part in the reduction (a rank that raised alone left the others waiting)."""
    def local(x, dim=(), keepdim=False):
        dims = sorted({d % x.dim() for d in dim} if dim else set(range(x.dim()))) if x.dim() else []
        if not any(x.shape[d] == 0 for d in dims):
            return op(x, list(dim), keepdim)
        shape = [1 if d in dims else n for d, n in enumerate(x.shape)] if keepdim else \
            [n for d, n in enumerate(x.shape) if d not in dims]
        if x.dtype.is_floating_point:
            fill = -math.inf if largest else math.inf
        elif x.dtype == torch.bool:
            fill = not largest
        else:
            fill = torch.iinfo(x.dtype).min if largest else torch.iinfo(x.dtype).max
        return torch.full(shape, fill, dtype=x.dtype, device=x.device)

    return local


def _random_without_handler(qualified):
    def handler(func, args, kwargs):
        raise UnsupportedOpError(
            f"bridge: {qualified} is a random op with no DTensor-semantic draw in dtensor (its "
            f"decomposition or a replicated fallback would draw different values on each rank); "
            f"accepted: the random ops of docs/PYTHON.md (rand_like, randn_like, bernoulli, dropout, "
            f"uniform_, normal_, exponential_, cauchy_, log_normal_, geometric_, random_, randint_like, rrelu, "
            f"multinomial)")

    return handler


def _masked_backward(name):
    """A backward op whose output_mask leaves gradients out (convolution_backward, the norms'
    without weight or bias): the engine's op, then None where the mask is False, as ATen returns it
    (ATen's kernel on the blocks returns None there, which the bridge's wrap passes through;
    dtensor's kernel computes every gradient)."""
    engine = functools.lru_cache(maxsize=None)(lambda: _engine(name))

    def handler(func, args, kwargs):
        mask = _bind(func, args, kwargs)["output_mask"]
        return tuple(o if m else None for o, m in zip(engine()(func, args, kwargs), mask))

    return handler


def _diagonal_scatter(func, args, kwargs):
    """diagonal_scatter(self, src, offset=0, dim1=0, dim2=1): a copy of self with dims dim1 and dim2
    whole (their Shards and any Partial made Replicate, the other dims keep their Shards), src copied
    into its diagonal view, which is then a view of each block (torch's decomposition goes through
    as_strided, which has no rule)."""
    b = _bind(func, args, kwargs)
    x, src = b["self"], b["src"]
    d1, d2 = (d % max(x.dim(), 1) for d in (b.get("dim1", 0), b.get("dim2", 1)))
    keep = [p if p.is_shard() and p.dim % x.dim() not in (d1, d2) else Replicate() for p in x._spec.placements]
    out = aten.clone.default(x if list(x._spec.placements) == keep else _moved(x, keep))
    if type(src) is not DTensor:  # autograd's zeros of src's size: the same on every rank
        src = DTensor(src.contiguous(), x._spec.with_([Replicate()] * len(keep), list(src.shape),
                                                      _dtype_name(src.dtype)), x._mesh)
    aten.diagonal.default(out, b.get("offset", 0), d1, d2).copy_(src)
    return out


_index_engine = _engine("index.Tensor")
_index_put_engine = _engine("index_put")

_SPECIAL = {
    "detach": _same_layout,
    "alias": _same_layout,
    "clone": _same_layout,
    "ones_like": _fill_like,
    "zeros_like": _fill_like,
    "empty_like": _fill_like,
    "copy_": _copy_,
    "zero_": _fill_,
    "fill_": _fill_,
    "new_zeros": _new_filled,
    "new_ones": _new_filled,
    "new_empty": _new_filled,
    "new_full": _new_filled,
    "new_empty_strided": _new_empty_strided,
    "_has_same_storage_numel": _wrapper_query,
    "nll_loss_forward": _nll_loss_forward,
    "nll_loss_backward": _nll_loss_backward,
    "multi_margin_loss_backward": _margin_loss_backward,
    "multilabel_margin_loss_backward": _margin_loss_backward,
    "multilabel_margin_loss_forward": _multilabel_margin_loss_forward,
    # _ctc_loss is computed whole (dynamic_output_shape: log_alpha's length is 2 max(target_lengths) + 1,
    # read from the data), so its backward's saved inputs arrive replicated: computed whole too (a
    # batch split would also need each block's offsets into 1-d concatenated targets).
    "_ctc_loss_backward": _replicated,
    "fractional_max_pool2d": _fractional_max_pool(2),
    "fractional_max_pool3d": _fractional_max_pool(3),
    "var_mean": _var_mean,
    "linalg__powsum": _powsum,
    "_weight_norm_interface_backward": _weight_norm_interface_backward,
    "_amp_foreach_non_finite_check_and_unscale_": _amp_unscale,
    "embedding_renorm_": _embedding_renorm_,
    "_scaled_dot_product_flash_attention_for_cpu": _sdpa_flash_cpu,
    "_scaled_dot_product_flash_attention_for_cpu_backward": _sdpa_flash_cpu_backward,
    "bernoulli_": _bernoulli_tensor,
    **dict.fromkeys(["uniform", "uniform_", "exponential", "exponential_", "cauchy", "cauchy_", "log_normal",
                     "log_normal_", "normal_", "normal_functional"], _continuous),
    **dict.fromkeys(["geometric", "geometric_", "random", "random_", "randint_like"], _discrete),
    "normal": _normal,
    "multinomial": _multinomial,
    "rrelu_with_noise": _rrelu_with_noise,
    "rrelu_with_noise_": _rrelu_with_noise,
    "rrelu_with_noise_backward": _rrelu_with_noise_backward,
    "histc": _histc,
    "histogram": _histogram,
    "amin": _engine("amin", local_func=_identity_on_empty(aten.amin.default, False)),
    "amax": _engine("amax", local_func=_identity_on_empty(aten.amax.default, True)),
    "_trilinear": _trilinear,
    **dict.fromkeys(["_histogramdd_bin_edges", "_histogramdd_from_bin_cts", "_histogramdd_from_bin_tensors"], _histogramdd),
    # _embedding_bag and _forward_only are a registered op (ops/embedding/bag_defs.cc).
    **dict.fromkeys(["_embedding_bag_backward", "_embedding_bag_dense_backward",
                     "_embedding_bag_per_sample_weights_backward"],
                    _column_parallel_bag),
    "isin": _elementwise_in("elements"),
    "searchsorted": _elementwise_in("self", lambda b: b["sorted_sequence"].dim() == 1 and (
        b.get("sorter") is None or b["sorter"].dim() == 1)),
    "index_reduce": _index_reduce,
    "addbmm": _addbmm,
    "allclose": _allclose,
    "as_strided": _as_strided,
    "resize_": _resize_,
    "as_strided_copy": _whole_strided,
    "as_strided_scatter": _whole_strided,
    # nonzero_static(self, size, fill_value): nonzero's indices padded or cut to a static size: the
    # k-th index depends on every element before it, computed whole as nonzero is.
    "nonzero_static": _replicated,
    "mode": _along_dim("dim"),
    "unfold": _along_dim("dimension", partial_passes=True),
    "unfold_copy": _along_dim("dimension", partial_passes=True),
    "unfold_backward": _unfold_backward,
    # segment_reduce(data, reduce, lengths/offsets, axis): segments along axis (whole), the other
    # dims keep their Shards; a sum from 0 is linear, so a Partial data passes through it (an
    # initial value would be added once per piece).
    "segment_reduce": _along_dim("axis", _linear_segment_sum, main="data"),
    "_segment_reduce_backward": _along_dim("axis", _linear_segment_sum, main="data", aligned=("grad", "output")),
    "cat": _cat,
    "expand_as": _expand_as,
    "_fused_adam_": _fused_adam(decoupled=False),
    "_fused_adamw_": _fused_adam(decoupled=True),
    "_fused_sgd_": _fused_sgd_,
    "_fused_adagrad_": _fused_adagrad_,
    "convolution": _convolution(_engine("convolution")),
    "convolution_backward": _convolution_backward(_masked_backward("convolution_backward")),
    "native_layer_norm_backward": _masked_backward("native_layer_norm_backward"),
    "native_group_norm_backward": _masked_backward("native_group_norm_backward"),
    "_local_scalar_dense": _answered_by("_local_scalar_dense", lambda t: t.item()),
    "index": _index,  # bool masks expanded, then the registered index.Tensor
    "mT": _matrix_transpose,
    "mH": _matrix_transpose,
    "adjoint": _matrix_transpose,
    "index_put": _index_put,  # bool masks expanded, then the registered index_put
    "put": _put,
    "diagonal_scatter": _diagonal_scatter,
}


# Single overloads run as other ATen ops: max(x) and min(x), the whole tensor's, are amax and amin
# over every dim (both propagate NaN, both refuse an empty tensor).
_OVERLOADS = {
    "_native_batch_norm_legit.default": _batch_norm_legit,
    "_native_batch_norm_legit.no_stats": _batch_norm_legit,
    "_native_batch_norm_legit_no_training.default": _batch_norm_legit,
    "native_batch_norm.default": _batch_norm_legit,
    "_batch_norm_with_update.default": _batch_norm_legit,
    "_batch_norm_no_update.default": _batch_norm_legit,
    "scatter.reduce": _scatter_reduce_form,
    "scatter.value_reduce": _scatter_reduce_form,
    "bernoulli.default": _bernoulli_tensor,
    "bernoulli.Tensor": _bernoulli_tensor,
    # The size queries (ops/metadata/): the registered ops' 0-d answers as Python ints and bools.
    **{overload: _answered_by(op, lambda t: int(t.item())) for overload, op in (
        ("sym_size.int", "sym_size.int"), ("sym_stride.int", "sym_stride.int"), ("sym_numel.default", "sym_numel"),
        ("sym_storage_offset.default", "sym_storage_offset"))},
    "sym_is_contiguous.default": _answered_by("sym_is_contiguous", lambda t: bool(t.item())),
    "set_.source_Tensor": lambda func, args, kwargs: _take_block(args[0], args[1]),
    # Tensor.__bool__'s reductions of a bool tensor (resize_token_embeddings' checks)
    "_is_all_true.default": lambda func, args, kwargs: aten.all.default(args[0]),
    "_is_any_true.default": lambda func, args, kwargs: aten.any.default(args[0]),
    "max.default": lambda func, args, kwargs: aten.amax.default(args[0], list(range(args[0].dim()))),
    "min.default": lambda func, args, kwargs: aten.amin.default(args[0], list(range(args[0].dim()))),
}


def _native_entry(func):
    """What the native __torch_dispatch__ keeps for one OpOverload (asked once per overload): an
    engine op whose adaptation is data as (registered name, layout-dependent kernel?, the callable
    run on the blocks, positional args kept for the engine or -1, size argument localized?, the
    positions of tensor arguments, the Python handler for a call with a number in one of them),
    anything else as its Python handler."""
    handler = _handlers.get(func)
    if handler is None:
        handler = _handlers[func] = _resolve(func)
    native = getattr(handler, "native", None)
    if native is None:
        return handler
    name, dtensor_kernel, keep, local_size, local_func, slots, fallback = native
    op = local_func or func
    # OpOverload.__call__ is a Python frame around `_op` (the C++ callable) unless a Python
    # dispatcher is attached to the overload.
    call = op._op if getattr(op, "_pyobj_dispatcher", None) is None and hasattr(op, "_op") else op
    return name, dtensor_kernel, call, keep, local_size, slots, fallback, getattr(handler, "python_kwargs", [])


_b.set_types(DTensor, torch.Tensor, torch.dtype, _native_entry)
_py_torch_dispatch = DTensor.__dict__["__torch_dispatch__"]  # the Python path (tests compare)
_native_torch_dispatch = classmethod(_b.torch_dispatch)


def _use_native_dispatch(on=True):
    """Selects DTensor.__torch_dispatch__: the native one (the default) or the all-Python one;
    both give the same results and placements (tests/python/test_torch_bridge.py checks)."""
    DTensor.__torch_dispatch__ = _native_torch_dispatch if on else _py_torch_dispatch


_use_native_dispatch(True)


@atexit.register
def _release_native():
    # The class (held by the native module) must not keep the native function, nor its caches their
    # Python objects, past the interpreter's teardown (nanobind reports them as leaks).
    _use_native_dispatch(False)
    _b.release_caches()


def _resolve(func):
    """The handler of one OpOverload (cached by the caller): bridge bookkeeping, an alias, a
    registered op (`aten::add.Tensor` -> "add.Tensor" if registered, else "add"), the in-place form
    of one, a decomposition, or an error naming the op."""
    namespace, base = func._schema.name.split("::", 1)
    overload = func._overloadname
    qualified = f"{namespace}.{base}.{overload}"
    if namespace != "aten":  # dtensor's ops are ATen's; prims and custom ops have no rules
        return _other_namespace(func, namespace, qualified)
    if any(a.is_out for a in func._schema.arguments):
        return _out_form(func, base, qualified)
    if base in _SPECIAL:
        return _SPECIAL[base]
    if f"{base}.{overload}" in _OVERLOADS:
        return _OVERLOADS[f"{base}.{overload}"]
    if base.startswith("_foreach_"):
        op = base[len("_foreach_"):]
        in_place = op.endswith("_")
        return _foreach(op[:-1] if in_place else op, in_place)
    aliases = _facts()[1]
    alias = aliases.get(f"{base}.{overload}") or aliases.get(base)
    if alias is not None:
        return _engine(*alias)
    names = _registry()
    dotted = base if overload == "default" else f"{base}.{overload}"
    if dotted in names:
        return _complex_scalars(func, _keywords_ours_lacks(func, dotted, _engine(dotted)))
    if base in names and _takes_tensors_where_aten_does(func, base):
        return _keywords_ours_lacks(func, base, _engine(base))
    if base.endswith("_") and not base.endswith("__"):
        packet = getattr(aten, base[:-1], None)
        if packet is not None and overload not in packet.overloads() and torch.Tag.inplace_view in func.tags:
            # transpose_.default's out-of-place form is transpose.int: the overload of the same arguments
            overload = _overload_taking(packet, _arguments(func._schema.arguments)) or overload
        if packet is not None and overload in packet.overloads():
            if torch.Tag.inplace_view in func.tags:
                return _in_place_view(getattr(packet, overload))
            if torch.Tag.pointwise in func.tags and torch.Tag.nondeterministic_seeded not in func.tags:
                return _on_aligned_blocks(_in_place(getattr(packet, overload)))
            return _in_place(getattr(packet, overload))
    return _without_rule(func, base, qualified)


def _without_rule(func, base, qualified):
    """The handler of an ATen op no dtensor op takes: a pointwise one on the blocks, one ATen
    implements by other ops (CompositeImplicitAutograd: movedim, narrow, tensor_split, ... when a
    decomposition calls them) by that implementation, any other by torch's own decomposition into
    ops the bridge runs (cached per overload by the caller); else an error naming the op."""
    if torch.Tag.nondeterministic_seeded in func.tags:
        return _random_without_handler(qualified)
    if torch.Tag.pointwise in func.tags and torch.Tag.nondeterministic_seeded not in func.tags and (
            not base.endswith("_")):
        return _pointwise_on_blocks
    # The backward of a pointwise op (hardshrink_backward(grad, self, lambd)) is pointwise too:
    # the derivative of an elementwise function is elementwise.
    forward = getattr(aten, base[:-len("_backward")], None) if base.endswith("_backward") else None
    if forward is not None and "default" in forward.overloads() and torch.Tag.pointwise in forward.default.tags:
        return _pointwise_on_blocks
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), torch._C.DispatchKey.CompositeImplicitAutograd):
        return lambda func, args, kwargs: func.decompose(*args, **kwargs)
    batch_dims = _batch_dims_of(base)
    if batch_dims:
        spatial = int(re.search(r"(\d)d(_aa)?(_backward)?$", base).group(1))  # upsample_bicubic2d_aa_backward: 2
        return functools.partial(_batch_dims_on_blocks, batch_dims, spatial)
    if torch.Tag.dynamic_output_shape in func.tags:
        # masked_select, unique, bincount, repeat_interleave: the output's size depends on every
        # element, so no rank can know its block's size without the others: every rank computes
        # the whole (replicated) result from replicated inputs, the one layout whose shape all
        # ranks agree on. (nonzero is a registered op with a data-dependent shape, OpDef::data_dependent:
        # it resolves by name before this and gathers its blocks' rows instead.)
        return _replicated
    if (base.lstrip("_").startswith("linalg_") or base in _LEGACY_LINALG) and not any(
            a.name in ("dim", "dims") for a in func._schema.arguments):  # vector_norm(x, dim=0) reduces the batch
        return _batched_matrices_on_blocks
    from torch._decomp import decomposition_table

    decomp = decomposition_table.get(func)
    if decomp is not None:
        if base.rstrip("_") in _ELEMENTWISE_DECOMPOSED:
            return _on_aligned_blocks(_decomposed(qualified, decomp))
        return _decomposed(qualified, decomp)
    # x << 3 is __lshift__.Scalar, an overload with its own kernel and no decomposition: it runs as
    # the packet's Tensor overload with the number as torch's wrapped number (_wrapped_numbers: of
    # the tensor's dtype where its kind allows, so uint8 << 3 stays uint8).
    packet = func.overloadpacket
    numbers = tuple(i for i, a in enumerate(func._schema.arguments) if str(a.type) == "number")
    if numbers and "Tensor" in packet.overloads() and _arguments(packet.Tensor._schema.arguments) == [
            (a.name, "Tensor" if i in numbers else str(a.type)) for i, a in enumerate(func._schema.arguments)]:
        return lambda func, args, kwargs: packet.Tensor(*_wrapped_numbers(args, numbers), **kwargs)
    return _unsupported(qualified)


def _arguments(arguments):
    """A schema's arguments as (name, type) pairs: what tells two overloads' calls apart."""
    return [(a.name, str(a.type)) for a in arguments]


def _overload_taking(packet, arguments, functional=False):
    """The name of `packet`'s overload whose arguments are `arguments` (_arguments' pairs), not
    mutating any when `functional`; None when there is none."""
    return next((o for o in packet.overloads() if _arguments(getattr(packet, o)._schema.arguments) == arguments
                 and not (functional and getattr(packet, o)._schema.is_mutable)), None)


def _out_form(func, base, qualified):
    """The handler of an out= overload (torch.mm(a, b, out=buf): aten.mm.out), whose rule is its
    functional overload's (same arguments less the outs, not mutating): that overload's result
    copied into each out tensor (copy_, which converts the dtype and writes through a bridge view
    as any copy_ does). Without such an overload, the op goes to _without_rule (torch's
    decompositions of out= overloads)."""
    outs = [a.name for a in func._schema.arguments if a.is_out]
    packet = func.overloadpacket
    functional = _overload_taking(packet, _arguments(a for a in func._schema.arguments if not a.is_out),
                                  functional=True)
    if functional is None:
        return _without_rule(func, base, qualified)
    functional = getattr(packet, functional)

    def handler(func, args, kwargs):
        targets = [kwargs[n] for n in outs]
        result = functional(*args, **{k: v for k, v in kwargs.items() if k not in outs})
        results = result if isinstance(result, (tuple, list)) else (result,)
        for name, target, r in zip(outs, targets, results):
            if tuple(target.shape) != tuple(r.shape):
                raise UnsupportedOpError(
                    f"bridge: {qualified}: out argument '{name}' has shape {tuple(target.shape)}, the result "
                    f"{tuple(r.shape)}; accepted: an out tensor of the result's shape (the bridge does not resize it)")
            target.copy_(r)
        return targets[0] if len(targets) == 1 and not isinstance(result, (tuple, list)) else tuple(targets)

    return handler


def _other_namespace(func, namespace, qualified):
    """The handler of an op outside ATen (a custom op): its implementation in other ops, run on the
    bridge tensors so each op it calls resolves here: a CompositeImplicitAutograd kernel or torch's
    registered decomposition. Else refused: prims (their kernels are ATen's reference code, below
    the ops the bridge runs), and a kernel for CompositeExplicitAutograd alone (what
    torch.library.custom_op registers: torch_nn._linear_cross_entropy_batch_chunked), which may make
    plain tensors with factories (torch.empty buffers written with out=) that no bridge tensor
    reaches, so it cannot run on blocks."""
    from torch._decomp import decomposition_table

    if namespace != "prims":
        if func._can_decompose():
            return lambda func, args, kwargs: func.decompose(*args, **kwargs)
        if func in decomposition_table:
            return _decomposed(qualified, decomposition_table[func])
    return _unsupported(qualified)


def _complex_scalars(func, handler):
    """`handler` of an overload taking a Scalar (mul.Scalar, add.Scalar, div.Scalar), for calls with
    real numbers; a complex Python number (polar's and complex ops' derivatives: mul(x, 1j)) runs as
    the overload packet's Tensor form, where the number is a wrapped 0-d tensor (_wrapped_numbers:
    torch's dtype promotion): dtensor's IValue holds no complex number (ops/ivalue.h)."""
    packet = func.overloadpacket
    scalars = [i for i, a in enumerate(func._schema.arguments) if str(a.type) == "number"]  # Scalar
    if not scalars or func._overloadname == "Tensor" or "Tensor" not in packet.overloads():
        return handler
    tensor_form = packet.Tensor

    def with_complex(func, args, kwargs):
        if any(isinstance(v, complex) for v in (*args, *kwargs.values())):
            return tensor_form(*args, **kwargs)
        return handler(func, args, kwargs)

    with_complex.python_kwargs = getattr(handler, "python_kwargs", [])
    native = getattr(handler, "native", None)
    if native is not None:
        with_complex.native = native[:6] + (with_complex,)
    return with_complex


def _keywords_ours_lacks(func, name, handler):
    """`handler` (the registered op `name`'s) for calls that pass only arguments dtensor's op has;
    a call passing a keyword argument of the ATen overload that the op lacks (not None) runs as:
    `dtype` (sum, mean): the input cast to it first, torch's documented meaning; `stable` (sort):
    dropped, dtensor's sort is stable; anything else (round's decimals, sdpa's enable_gqa): as an
    op without a rule (_without_rule), whose error names the op."""
    ours = {a[0] for a in _schemas().get(name, [])}
    extra = [a.name for a in func._schema.arguments if a.kwarg_only and not a.is_out and a.name not in ours]
    if not extra:
        return handler
    namespace, base = func._schema.name.split("::", 1)
    otherwise = _without_rule(func, base, f"{namespace}.{base}.{func._overloadname} with "
                              f"{'/'.join(extra)} (dtensor's {name} takes no such argument)")

    def guarded(func, args, kwargs):
        passed = [k for k in extra if kwargs.get(k) is not None]
        if not passed:
            return handler(func, args, kwargs)
        if set(passed) <= {"dtype", "stable"}:
            rest = {k: v for k, v in kwargs.items() if k not in passed}
            if "dtype" in passed and isinstance(args[0], DTensor):
                args = (aten._to_copy.default(args[0], dtype=kwargs["dtype"]), *args[1:])
            return handler(func, args, rest)
        return otherwise(func, args, kwargs)

    guarded.python_kwargs = extra
    native = getattr(handler, "native", None)
    if native is not None:
        guarded.native = native[:6] + (guarded,)
    return guarded


def _takes_tensors_where_aten_does(func, name):
    """Whether the registered op `name` can take this overload's arguments: every ATen Tensor argument
    lands on a Tensor of ours (clamp.Tensor's tensor bounds cannot go to dtensor's clamp, whose
    bounds are Scalars: that overload goes to torch's decomposition). A number where ours takes a
    Tensor is fine: the engine wraps it (_wrapped_numbers)."""
    ours = _schemas().get(name, [])
    for arg, (_, typ, *_rest) in zip(func._schema.arguments, ours):
        if "Tensor" in str(arg.type) and "Tensor" not in typ:
            return False
        if "Device" in str(arg.type):  # to.device(x, device, dtype): ours is to(x, dtype)
            return False
    return True


def parallelize_module(module, device_mesh, parallelize_plan=None):
    """PyTorch's parallelize_module over bridge tensors (dtensor/tensor_parallel.py documents it)."""
    from .tensor_parallel import parallelize_module as run
    return run(module, device_mesh, parallelize_plan)


def fully_shard(module, mesh):
    """FSDP-style sharding of `module`'s parameters over the data-parallel mesh dim
    (python/dtensor/fully_shard.py documents it)."""
    from .fully_shard import fully_shard as run
    return run(module, mesh)
