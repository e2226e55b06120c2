"""The ATen side of dtensor.plan's import (python/dtensor/planning.py): which ATen ops map onto
which planner ops (_map), which are bookkeeping (_PASS, _SKIP), which create constants (_CREATE),
and the matrix-product and convolution FLOPs counted as torch.utils.flop_counter counts them
(FLOP_OPS)."""
import functools


# dtype names of the planner (dtensor/core/dtype.cc).
_DTYPES = {
    "torch.float32": "float32", "torch.float64": "float64", "torch.float16": "float16",
    "torch.bfloat16": "bfloat16", "torch.int64": "int64", "torch.int32": "int32",
    "torch.int16": "int16", "torch.int8": "int8", "torch.uint8": "uint8", "torch.bool": "bool",
    "torch.complex64": "complex64", "torch.complex128": "complex128",
}

# Ops whose output is their input for planning (views of the same data, bookkeeping, identity in
# a plan): the value passes through to the consumers.
_PASS = {
    "alias", "detach", "clone", "contiguous", "lift_fresh_copy", "dropout", "_to_copy", "to",
    "copy", "type_as",
}
# Ops with no value to plan (assertions, shape queries); their users, if any, see static shapes.
_SKIP = {"_assert_tensor_metadata", "_assert_scalar", "_assert_async", "sym_size", "sym_numel",
         "sym_stride", "sym_storage_offset", "sym_is_contiguous", "sym_constrain_range_for_size"}
# Creation ops: no tensor input (or one that gives only the shape: the *_like ops and random draws),
# so always constants.
_CREATE = {"arange", "zeros", "ones", "full", "empty", "new_ones", "new_zeros", "new_full",
           "new_empty", "scalar_tensor", "zeros_like", "ones_like", "full_like", "empty_like",
           "tensor", "eye", "tril_indices", "triu_indices", "rand", "randn", "rand_like", "randn_like",
           "bernoulli"}

# Matrix products and convolutions counted as FLOPs, with torch.utils.flop_counter's convention: 2
# per multiply-add, bias adds not counted; scaled_dot_product_attention counts its two products
# (Q K^T and P V); a convolution 2 x (output elements) x (weight elements per output channel).
# Normalization, pooling and pointwise ops count 0, as there.
CONV_OPS = ("convolution", "_convolution", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
            "conv_transpose3d")
FLOP_OPS = ("mm", "bmm", "addmm", "baddbmm", "linear", "matmul", "scaled_dot_product_attention") + CONV_OPS

# ATen ops returning (out, statistics...) planned as the planner op's single output; the statistics
# (saved mean and rstd, updated running stats, nll_loss's total weight) are for the backward and
# the buffers, not planned.
_FIRST_OF = {"native_layer_norm", "native_batch_norm", "_native_batch_norm_legit", "nll_loss_forward",
             "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training"}
# ATen ops returning the values only, planned as the planner's op returning (values, indices).
_VALUES_OF = {"max_pool1d", "max_pool2d", "max_pool3d"}


def _functional(name, target):
    """The out-of-place name of an in-place ATen op (relu_ -> relu, add_ -> add), else `name`.
    torch.export's graph refers to the in-place op's result node from then on, so planning the
    out-of-place form gives every later use the new value (the same shape and dtype)."""
    schema = getattr(target, "_schema", None)
    if name.endswith("_") and not name.endswith("__") and schema is not None and schema.is_mutable:
        return name[:-1]
    return name


def _numel(shape):
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _matmul_flops(name, ins, out, transposed=False):
    """Forward FLOPs of a counted op (FLOP_OPS) from its tensor input and output shapes (`transposed`:
    the flag of aten.convolution)."""
    if name == "scaled_dot_product_attention":
        q, k, v = ins[0], ins[1], ins[2]
        bh = _numel(q[:-2])
        return 2 * bh * q[-2] * k[-2] * q[-1] + 2 * bh * q[-2] * k[-2] * v[-1]
    if name in CONV_OPS:
        x, w = ins[0], ins[1]
        if transposed or name.startswith("conv_transpose"):
            # flop_counter's transposed convolution: the input's positions, each times every weight.
            return 2 * x[0] * _numel(x[2:]) * _numel(w)
        return 2 * _numel(out) * (_numel(w) // w[0])
    if name in ("addmm", "baddbmm"):
        a = ins[1]
    else:
        a = ins[0]
    return 2 * _numel(out) * a[-1]


def _aten_name(target):
    """'aten.linear.default' -> 'linear'; 'aten.add.Tensor' -> 'add'; other callables: their name."""
    s = getattr(target, "_opname", None) or getattr(target, "__name__", None) or str(target)
    return s


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for e in x:
            yield from _flatten(e)
    elif isinstance(x, dict):
        for e in x.values():
            yield from _flatten(e)
    else:
        yield x


# Argument names of ATen's batch-norm forms (native_functions.yaml) by position: torch.export's
# graph has batch_norm, run_decompositions() the _native_batch_norm_legit* forms.
_BN = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps")
_BATCH_NORM_ARGS = {"batch_norm": _BN, "native_batch_norm": _BN, "_native_batch_norm_legit": _BN,
                    "_native_batch_norm_legit_functional": _BN,
                    "_native_batch_norm_legit_no_training": _BN[:5] + _BN[6:]}
# Pooling ops the engine registers with ATen's schemas (ops/pooling/defs.cc): max pooling as
# max_pool*d_with_indices (values and indices; _VALUES_OF), _adaptive_avg_pool2d is the core-ATen form.
_POOLING = {**{f"avg_pool{d}d": f"avg_pool{d}d" for d in (1, 2, 3)},
            **{f"max_pool{d}d": f"max_pool{d}d_with_indices" for d in (1, 2, 3)},
            **{f"max_pool{d}d_with_indices": f"max_pool{d}d_with_indices" for d in (1, 2, 3)},
            "adaptive_avg_pool2d": "adaptive_avg_pool2d", "_adaptive_avg_pool2d": "adaptive_avg_pool2d"}


def _convolution(name, args, kw, w, A):
    """The planner's convolution (ATen's convolution schema, ops/planned/defs.cc) for ATen's
    convNd / convolution / _convolution, or None: transposed, unbatched, or padding='same' that ATen
    would pad unevenly (the planner's padding is symmetric)."""
    x, wt = w._meta(args[0]), w._meta(args[1])
    sd = wt.dim() - 2
    if x.dim() != wt.dim() or name.startswith("conv_transpose"):
        return None
    if name in ("convolution", "_convolution"):
        stride, padding, dilation, transposed, _, groups = args[3:9]
        if transposed:
            return None
    else:
        a = dict(zip(("input", "weight", "bias", "stride", "padding", "dilation", "groups"), args))
        a.update(kw)
        stride, padding, dilation, groups = (a.get("stride", 1), a.get("padding", 0), a.get("dilation", 1),
                                             a.get("groups", 1))

    def per_dim(v):
        v = [v] if isinstance(v, int) else list(v)
        return v * sd if len(v) == 1 else v

    dilation = per_dim(dilation)
    if padding == "valid":
        padding = 0
    elif padding == "same":
        total = [d * (k - 1) for d, k in zip(dilation, wt.shape[2:])]
        if any(t % 2 for t in total):
            return None
        padding = [t // 2 for t in total]
    bias = args[2] if len(args) > 2 else kw.get("bias")
    return "convolution", [A(args[0]), A(args[1]), None if bias is None else A(bias), per_dim(stride),
                           per_dim(padding), dilation, False, [0] * sd, int(groups)], {}


@functools.lru_cache(maxsize=None)
def _schemas():
    """The registered ops' arguments (dtensor.ops.schemas(): every family's, the planned one's too)."""
    from . import ops
    return ops.schemas()


@functools.lru_cache(maxsize=None)
def _aliases():
    """ATen name -> registered op, for every alias (OpDef::aten.aliases): a call binds by argument
    name as the op's own name does (ATen arguments the op lacks must be at their defaults)."""
    from . import ops
    return {alias: op for op, (_, aliases, *_) in ops.aten_facts().items() for alias, *_ in aliases}


def registered_op(name, overload):
    """The registered op an ATen call of `name`.`overload` maps onto by name: the dotted name, the bare
    name, or an alias; None when there is none."""
    dotted = name if overload in ("", "default") else f"{name}.{overload}"
    schemas = _schemas()
    for cand in (dotted, name):
        if cand in schemas:
            return cand
    aliases = _aliases()
    return aliases.get(dotted) or aliases.get(name)


def _declared(schema, arg):
    """An ATen argument's declared type: torch reports ScalarType and MemoryFormat as int."""
    import re
    m = re.search(r"(ScalarType|MemoryFormat|Layout|Device)\??\s+" + re.escape(arg.name) + r"\b", str(schema))
    return m.group(1) if m else str(arg.type)


# The ATen declared types an argument of each dtensor schema type accepts.
_COMPATIBLE = {
    "Tensor": ("Tensor", "Optional[Tensor]"),
    "Tensor[]": ("List[Tensor]",),
    "Tensor?[]": ("List[Optional[Tensor]]",),
    "int": ("int", "Optional[int]", "SymInt", "Optional[SymInt]"),
    "int[]": ("List[int]", "Optional[List[int]]", "List[SymInt]", "Optional[List[SymInt]]", "int", "SymInt"),
    "float": ("float", "Optional[float]", "number", "Optional[number]"),
    "float[]": ("List[float]", "Optional[List[float]]"),
    "bool": ("bool", "Optional[bool]"),
    "str": ("str", "Optional[str]", "ScalarType", "MemoryFormat"),
    "Scalar": ("number", "Optional[number]", "int", "float"),
}


def schema_fit(op, schema):
    """Why an ATen schema's calls cannot bind to the registered op `op` by argument name, or "" when
    they can: every argument of the op must be one of ATen's of a compatible type, or have a default
    (ATen arguments the op lacks are checked per call: absent or at their default)."""
    theirs = {a.name: _declared(schema, a) for a in schema.arguments}
    for arg, typ, optional, has_default, _ in _schemas()[op]:
        if arg not in theirs:
            if not has_default:
                return f"ATen's {schema.name} has no argument '{arg}'"
            continue
        if theirs[arg] not in _COMPATIBLE[typ]:
            return f"'{arg}' is {theirs[arg]} in ATen's {schema.name}, {typ} in dtensor's {op}"
    return ""


def _value(v, typ, optional, w, where):
    """A call's argument as the planner's JSON takes it for a dtensor argument of type `typ`, or
    raises ValueError when it does not fit."""
    import torch
    if v is None:
        if optional:
            return None
        raise ValueError
    if typ == "Tensor":
        if not w._is_tensor(v):
            raise ValueError
        return w._arg(v, where)
    if typ in ("Tensor[]", "Tensor?[]"):  # the planner's graphs hold no None entry (index.Tensor's x[:, i])
        if not isinstance(v, (list, tuple)) or not all(w._is_tensor(e) for e in v):
            raise ValueError
        return [w._arg(e, where) for e in v]
    if w._is_tensor(v):
        raise ValueError  # a data-dependent value (a SymInt node): the planner needs it static
    if typ == "str":
        if isinstance(v, torch.dtype) and str(v) in _DTYPES:
            return _DTYPES[str(v)]
        if isinstance(v, torch.memory_format):  # sym_is_contiguous's, by name: "channels_last"
            return str(v).replace("torch.", "")
        if not isinstance(v, str):
            raise ValueError
        return v
    if typ == "bool":
        if not isinstance(v, bool):
            raise ValueError
        return v
    if typ in ("int", "float", "Scalar"):
        if (isinstance(v, bool) and typ != "Scalar") or not isinstance(v, (int, float)):
            raise ValueError
        if typ == "int" and not isinstance(v, int):
            raise ValueError
        return float(v) if typ == "float" else v
    if typ in ("int[]", "float[]"):
        vs = [v] if isinstance(v, (int, float)) else v
        if not isinstance(vs, (list, tuple)) or not all(isinstance(e, (int, float)) for e in vs):
            raise ValueError
        return [int(e) if typ == "int[]" else float(e) for e in vs]
    raise ValueError


def _by_schema(name, node, w, where):
    """(op, args, kwargs) for an ATen call bound to the registered op of its name by argument name
    (dtensor's schemas are ATen's, or a prefix of them), or None: no such op, an ATen argument the
    op lacks at a non-default value, or a value of another type."""
    schema = getattr(node.target, "_schema", None)
    op = registered_op(name, getattr(node.target, "_overloadname", "")) if schema is not None else None
    if op is None or schema_fit(op, schema):
        return None
    bound = dict(zip((a.name for a in schema.arguments), node.args))
    bound.update(node.kwargs)
    ours = _schemas()[op]
    names = {a[0] for a in ours}
    for a in schema.arguments:
        if a.name in bound and a.name not in names:
            if not a.has_default_value() or bound[a.name] != a.default_value:
                return None  # e.g. a dtype or memory_format dtensor's op does not take
    args, kwargs = [], {}
    try:
        for position, (arg, typ, optional, has_default, keyword_only) in enumerate(ours):
            if arg not in bound:
                if not has_default:
                    return None
                continue
            v = _value(bound[arg], typ, optional, w, where)
            if keyword_only or kwargs or len(args) < position:
                kwargs[arg] = v  # after a defaulted gap, by name
            else:
                args.append(v)
    except ValueError:
        return None
    return op, args, kwargs


def _map(name, node, val, w, where):
    """(planner op, args, kwargs) for an ATen call the planner has a rule for, else None. `w` is
    the walker (planning._Walker): tensor arguments become the names of its graph's nodes."""
    args = list(node.args)
    kw = dict(node.kwargs)
    A = lambda a: w._arg(a, where)  # noqa: E731
    is_t = w._is_tensor
    overload = getattr(node.target, "_overloadname", "")

    def size_of(v):
        return [int(s) for s in v.shape]

    if name in ("mm", "bmm", "matmul"):
        return name, [A(args[0]), A(args[1])], {}
    if name == "addmm":
        return "addmm", [A(args[0]), A(args[1]), A(args[2])], {"beta": kw.get("beta", 1), "alpha": kw.get("alpha", 1)}
    if name == "linear":
        return "linear", [A(a) for a in args[:3]], {}
    if name in ("view", "_unsafe_view", "reshape", "unflatten"):
        return "reshape", [A(args[0]), size_of(val)], {}
    if name == "expand":
        return "expand", [A(args[0]), size_of(val)], {}
    if name in ("transpose", "permute", "unsqueeze", "select", "flatten", "cumsum", "softmax", "log_softmax"):
        if name in ("softmax", "log_softmax"):
            return name, [A(args[0]), args[1]], {}
        return name, [A(a) for a in args], {}
    if name in ("_softmax", "_log_softmax"):
        return name[1:], [A(args[0]), args[1]], {}
    if name == "t":
        return "t", [A(args[0])], {}
    if name == "squeeze":
        dims = args[1] if len(args) > 1 else None
        if isinstance(dims, int):
            dims = [dims]
        return "squeeze", [A(args[0]), dims], {}
    if name == "slice":
        x = w._meta(args[0])
        dim = args[1] if len(args) > 1 else 0
        size = int(x.shape[dim])
        start = args[2] if len(args) > 2 and args[2] is not None else 0
        end = args[3] if len(args) > 3 and args[3] is not None else size
        step = args[4] if len(args) > 4 else 1
        # ATen clamps (end = INT64_MAX means "to the end"); the planner's schema takes the clamped range.
        start = max(0, min(size, start + size if start < 0 else start))
        end = max(0, min(size, end + size if end < 0 else end))
        return "slice", [A(args[0]), dim, start, end, step], {}
    if name == "split" and overload == "Tensor":
        return "split", [A(args[0]), args[1], args[2] if len(args) > 2 else 0], {}
    if name == "split_with_sizes":  # torch.split's chunks: equal sizes, the last possibly smaller
        sizes = list(args[1])
        if sizes and all(x == sizes[0] for x in sizes[:-1]) and 0 < sizes[-1] <= sizes[0]:
            return "split", [A(args[0]), sizes[0], args[2] if len(args) > 2 else 0], {}
        return None
    if name in ("cat", "stack"):
        return name, [[A(t) for t in args[0]], args[1] if len(args) > 1 else 0], {}
    if name == "embedding":
        return "embedding", [A(args[0]), A(args[1])], {}
    if name == "layer_norm":
        eps = args[4] if len(args) > 4 else 1e-5
        return "layer_norm", [A(args[0]), list(args[1]), A(args[2]) if len(args) > 2 else None,
                              A(args[3]) if len(args) > 3 else None, eps], {}
    if name == "native_layer_norm":  # (out, mean, rstd): _call keeps out; the statistics stay unplanned
        return "layer_norm", [A(args[0]), list(args[1]), A(args[2]), A(args[3]), args[4]], {}
    if name in _BATCH_NORM_ARGS:
        names = _BATCH_NORM_ARGS[name]
        if name == "_native_batch_norm_legit" and getattr(node.target, "_overloadname", "") == "no_stats":
            names = ("input", "weight", "bias", "training", "momentum", "eps")
        a = dict(zip(names, args))
        a.update(kw)
        # The running statistics are buffers (constants); the planner's batch_norm leaves them out.
        return "batch_norm", [A(a["input"]), A(a.get("weight")), A(a.get("bias")), bool(a.get("training", False)),
                              float(a.get("momentum", 0.1)), float(a.get("eps", 1e-5))], {}
    if name in CONV_OPS:
        return _convolution(name, args, kw, w, A)
    if name in _POOLING:
        return _POOLING[name], [A(args[0]), *args[1:]], kw
    if name == "rms_norm":
        eps = args[3] if len(args) > 3 else None
        return "rms_norm", [A(args[0]), list(args[1]), A(args[2]) if len(args) > 2 else None, eps], {}
    if name == "gelu":
        return "gelu", [A(args[0])], {"approximate": kw.get("approximate", "none")}
    if name in ("silu", "relu", "tanh", "sigmoid", "exp", "log", "neg", "rsqrt", "sqrt", "abs"):
        return name, [A(args[0])], {}
    if name in ("add", "sub", "mul", "div"):
        a, b = args[0], args[1]
        alpha = kw.get("alpha", 1)
        if is_t(a) and is_t(b):
            if name in ("add", "sub"):
                return name, [A(a), A(b)], {"alpha": alpha}
            if kw.get("rounding_mode") is not None:
                return None
            return name, [A(a), A(b)], {}
        if is_t(a) and isinstance(b, (int, float)) and not isinstance(b, bool):
            if name in ("add", "sub"):
                return "add.Scalar", [A(a), (b if name == "add" else -b) * alpha], {}
            if name == "div" and kw.get("rounding_mode") is not None:
                return None
            return f"{name}.Scalar", [A(a), b], {}
        return None
    if name == "pow" and overload == "Tensor_Scalar":
        return "pow.Tensor_Scalar", [A(args[0]), args[1]], {}
    if name in ("mean", "sum", "amax", "amin") and is_t(args[0]):
        if name in ("mean", "sum") and "dtype" in kw:
            return None
        dims = args[1] if len(args) > 1 else ([] if name in ("amax", "amin") else None)  # the schemas' defaults
        if isinstance(dims, int):
            dims = [dims]
        return name, [A(args[0]), dims, args[2] if len(args) > 2 else kw.get("keepdim", False)], {}
    if name in ("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum") and all(is_t(a) for a in args[:2]):
        return name, [A(args[0]), A(args[1])], {}
    if name == "where" and overload == "self":
        return "where", [A(a) for a in args[:3]], {}
    if name == "masked_fill" and overload == "Scalar":
        return "masked_fill", [A(args[0]), A(args[1]), args[2]], {}
    if name == "scaled_dot_product_attention":
        names = ["attn_mask", "dropout_p", "is_causal"]
        out = [A(a) for a in args[:3]]
        extra = dict(zip(names, args[3:6]))
        extra.update({k: v for k, v in kw.items() if k in names})
        if kw.get("enable_gqa"):
            return None  # the planner's sdpa takes equal head counts
        q, k = w._meta(args[0]), w._meta(args[1])
        if tuple(q.shape[:-2]) != tuple(k.shape[:-2]):
            return None
        mask = extra.get("attn_mask")
        # dropout_p is left out, as dropout is: it does not change a plan (and the planner's sdpa has none).
        return "scaled_dot_product_attention", out + [A(mask) if mask is not None else None, 0.0,
                                                      bool(extra.get("is_causal", False))], (
            {"scale": kw["scale"]} if kw.get("scale") is not None else {})
    if name in ("pad", "constant_pad_nd"):
        mode = args[2] if name == "pad" and len(args) > 2 else kw.get("mode", "constant")
        value = args[3] if name == "pad" and len(args) > 3 else (args[2] if len(args) > 2 else kw.get("value"))
        return "pad", [A(args[0]), list(args[1]), mode, None if value is None else float(value)], {}
    if name == "native_dropout":  # (out, mask): the registered philox_dropout; the seed does not change a plan
        b = dict(zip(("input", "p", "train"), args))
        b.update(kw)
        p = 0.0 if b.get("train") is False else float(b["p"])
        return "philox_dropout", [A(b["input"]), p, 0, 0], {}
    if name in ("nll_loss", "nll_loss_forward"):  # ATen's reduction is an int, dtensor's a name
        b = dict(zip(("self", "target", "weight", "reduction", "ignore_index"), args))
        b.update(kw)
        if b.get("weight") is not None:
            return None
        return "nll_loss", [A(b["self"]), A(b["target"]), None, {0: "none", 1: "mean", 2: "sum"}[b.get("reduction", 1)],
                            b.get("ignore_index", -100)], {}
    if name == "cross_entropy_loss":
        reduction = {0: "none", 1: "mean", 2: "sum"}[args[3] if len(args) > 3 else kw.get("reduction", 1)]
        x = w._meta(args[0])
        if x.dim() != 2 or (len(args) > 2 and args[2] is not None):
            return None  # the planner's cross_entropy takes [N, C] logits and no class weights
        return "cross_entropy", [A(args[0]), A(args[1]), None, reduction,
                                 args[4] if len(args) > 4 else -100,
                                 float(args[5]) if len(args) > 5 else 0.0], {}
    return _by_schema(name, node, w, where)
