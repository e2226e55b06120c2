"""PyTorch's OpInfo samples as an independent oracle for dtensor's ops.

Each OpInfo sample is translated to one ATen-style call (`Call`): the dtensor op name, the arguments
(torch tensors, lists of them, plain values) and torch's reference function taking the same
arguments. `run_sample` runs the call (a) on a 1-rank mesh, Replicate (dtensor's local kernel) and
(b) on a [2, 2] thread mesh with seeded random input placements, and compares both with torch's
result: shapes, dtypes, values (NaN positions included) and indices exactly.
"""
import dataclasses
import itertools
import math
import random
import warnings
import zlib

import numpy as np
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db

import dtensor
from dtensor import Partial, Replicate, Shard

import opinfo_seeding

opinfo_seeding.seed_host_generators_only()

DTYPES = (torch.float32, torch.float64, torch.int64)  # dtensor's dtypes checked here
# torch's byte, char and short: the first NARROW_SAMPLES samples of each entry that has kernels for
# them, where wrapping arithmetic, promotion (uint8 with int8 is int16) and 8- and 16-bit radix keys
# differ from int64's.
NARROW_DTYPES = (torch.uint8, torch.int8, torch.int16)
NARROW_SAMPLES = 3
COMPLEX_DTYPES = (torch.complex64, torch.complex128)  # for entries with no kernel of DTYPES
MAX_SAMPLES = 24  # per (OpInfo entry, dtype); the pooling entries have hundreds, a seeded subset runs
TOL = {torch.float32: (1e-5, 1e-5), torch.float64: (1e-10, 1e-12),  # (rtol, atol); other dtypes: exact
       torch.complex64: (1e-5, 1e-5), torch.complex128: (1e-10, 1e-12)}


class Skip(Exception):
    """A sample the oracle cannot translate to an ATen call dtensor defines; the reason is counted
    under `op` (the dtensor op it would call)."""

    def __init__(self, reason, op=""):
        super().__init__(reason)
        self.op = op


@dataclasses.dataclass
class Call:
    op: str                      # dtensor op name (with overload)
    args: list                   # torch tensors, lists of tensors, values
    kwargs: dict
    ref: object                  # torch's function of (*args, **kwargs)
    index_outputs: tuple = ()    # outputs holding indices: compared exactly
    any_tied_index: bool = False  # torch leaves the index among tied values unspecified
    partial: str = ""            # "all": Partial inputs meaningful for every tensor; "one": one tensor
    grad: bool = False           # the gradients are compared with torch's too (float64 samples)


def aten(name):
    packet = getattr(torch.ops.aten, name)  # resolves the overload from the arguments, as ATen does
    return lambda *a, **k: packet(*a, **k)


def ints(v, n=None):
    """An int or int sequence as a list (an int repeated n times, as ATen's int[n] takes it)."""
    if isinstance(v, (list, tuple, torch.Size)):
        return [int(e) for e in v]
    return [int(v)] * (n or 1)


def positional(s, names):
    """The sample's args and kwargs bound to `names` (the ATen arguments after the first)."""
    if len(s.args) > len(names):
        raise Skip(f"more positional arguments than ATen's {names}")
    out = dict(zip(names, s.args))
    for k, v in s.kwargs.items():
        if k in out:
            raise Skip(f"argument {k} given twice")
        out[k] = v
    return out


def drop_defaults(kw, **defaults):
    """Drops keyword arguments equal to the ATen default, which dtensor's schema may not list."""
    for k, d in defaults.items():
        if k in kw and (kw[k] is d or kw[k] == d):
            del kw[k]
    return kw


# ---- translators: OpInfo sample -> Call ------------------------------------------------------------

def unary(name, partial="", grad=False):
    return lambda s: Call(name, [s.input], dict(s.kwargs), aten(name), partial=partial, grad=grad)


def silu(s):
    kw = drop_defaults(dict(s.kwargs), inplace=False)
    return Call("silu", [s.input, *s.args], kw, aten("silu"))


def gelu(s):
    return Call("gelu", [s.input], dict(s.kwargs), aten("gelu"))


SCALAR_OVERLOAD = {"add": "add.Scalar", "mul": "mul.Scalar", "div": "div.Scalar", "pow": "pow.Tensor_Scalar"}


def binary(name, partial="", grad=False, scalar_other=True):
    def tr(s):
        other = s.args[0]
        if isinstance(other, complex):
            raise Skip("complex scalar")
        op = name
        if not isinstance(other, torch.Tensor):
            if not scalar_other:
                raise Skip("a Python-number operand: dtensor defines the Tensor-Tensor overload only", name)
            op = SCALAR_OVERLOAD.get(name, name)  # dtensor's Scalar overload, as ATen's
        return Call(op, [s.input, other, *s.args[1:]], dict(s.kwargs), aten(name),
                    partial=partial if op == name else "", grad=grad)
    return tr


def where(s):
    # OpInfo's where is (self, condition, other); ATen's where.self is (condition, self, other).
    cond, other = s.args
    return Call("where", [cond, s.input, other], dict(s.kwargs), aten("where"))


def masked_fill(s):
    mask, value = s.args
    if isinstance(value, torch.Tensor):
        value = value.item()  # masked_fill.Tensor with a 0-d value is masked_fill.Scalar
    return Call("masked_fill", [s.input, mask, value], {}, aten("masked_fill"))


def reduction(name, partial=""):
    def tr(s):
        kw = positional(s, ["dim", "keepdim"])
        if kw.get("dim") is not None and not (name == "prod" and isinstance(kw["dim"], int)):
            kw["dim"] = ints(kw["dim"])  # prod.dim_int takes one int, the others int[1]
        if kw.get("dim", 0) is None:
            del kw["dim"]
        return Call(name, [s.input], kw, aten(name), partial=partial)
    return tr


def var_std(name):
    def tr(s):
        kw = positional(s, ["dim", "unbiased" if s.args and isinstance(s.args[0], bool) else "dim", "keepdim"])
        if "unbiased" in kw:  # std(x, unbiased) is std.correction with correction 1 or 0
            kw["correction"] = 1 if kw.pop("unbiased") else 0
        if kw.get("dim") is not None:
            kw["dim"] = ints(kw["dim"])
        elif "dim" in kw:
            del kw["dim"]
        if kw.get("correction", 0) is None:
            del kw["correction"]
        return Call(name, [s.input], kw, aten(name))
    return tr


def with_dim(name, indices=(1,)):
    """max.dim, min.dim, median.dim, nanmedian.dim; their whole-tensor overloads without a dim."""
    def tr(s):
        kw = positional(s, ["dim", "keepdim"])
        if "dim" not in kw:
            if name in ("max", "min"):
                raise Skip("max()/min() over all elements: dtensor defines only max.dim/min.dim", name + ".dim")
            return Call(name, [s.input], kw, aten(name))
        return Call(name + ".dim", [s.input, kw.pop("dim")], kw, aten(name), index_outputs=indices)
    return tr


def kthvalue(s):
    kw = positional(s, ["k", "dim", "keepdim"])
    # torch's CPU kthvalue picks among tied values by its quickselect's order (undocumented);
    # dtensor's breaks ties by position. Under ties any index holding the kth value is right.
    return Call("kthvalue", [s.input, kw.pop("k")], kw, aten("kthvalue"), index_outputs=(1,),
                any_tied_index=True)


def sort(s):
    # sort(x, dim, descending) and sort(x, *, stable, dim, descending): dtensor's kernel is stable
    # (ties by index); torch's order among ties is specified only with stable=True.
    kw = positional(s, ["dim", "descending"])
    stable = kw.get("stable")
    op = "sort.stable" if "stable" in kw else "sort"
    return Call(op, [s.input], kw, aten("sort"), index_outputs=(1,), any_tied_index=stable is not True, grad=True)


def topk(s):
    # torch's topk leaves the order among tied values unspecified: any index holding the value is
    # right there.
    kw = positional(s, ["k", "dim", "largest", "sorted"])
    return Call("topk", [s.input, kw.pop("k")], kw, aten("topk"), index_outputs=(1,), any_tied_index=True,
                grad=True)


def argmaxmin(name):
    def tr(s):
        kw = positional(s, ["dim", "keepdim"])
        if kw.get("dim", 0) is None:
            del kw["dim"]
        return Call(name, [s.input], kw, aten(name), index_outputs=(0,))
    return tr


def scan(name, indices=(), partial=""):
    def tr(s):
        kw = positional(s, ["dim"])
        return Call(name, [s.input, kw.pop("dim")], kw, aten(name), index_outputs=indices, partial=partial)
    return tr


def softmax(name):
    def tr(s):
        kw = positional(s, ["dim"])
        if kw.get("dtype", 0) is None:
            del kw["dtype"]
        return Call(name, [s.input, kw.pop("dim")], kw, aten(name))
    return tr


def norm(name, names):
    def tr(s):
        kw = positional(s, names)
        ns = ints(kw.pop("normalized_shape"))
        if name == "layer_norm":
            kw = drop_defaults(kw, weight=None, bias=None)
        else:
            kw = drop_defaults(kw, weight=None, eps=None)
        return Call(name, [s.input, ns], kw, aten(name))
    return tr


def native_layer_norm(s):
    # native_layer_norm(input, normalized_shape, weight, bias, eps): every argument explicit.
    kw = positional(s, ["normalized_shape", "weight", "bias", "eps"])
    args = [s.input, ints(kw["normalized_shape"]), kw.get("weight"), kw.get("bias"), float(kw["eps"])]
    return Call("native_layer_norm", args, {}, aten("native_layer_norm"), grad=True)


def native_group_norm(s):
    # native_group_norm(input, weight, bias, N, C, HxW, group, eps): every argument explicit.
    kw = positional(s, ["weight", "bias", "N", "C", "HxW", "group", "eps"])
    sizes = [int(kw[k]) for k in ("N", "C", "HxW", "group")]
    args = [s.input, kw.get("weight"), kw.get("bias"), *sizes, float(kw["eps"])]
    return Call("native_group_norm", args, {}, aten("native_group_norm"), grad=True)


def matrix(name, names, partial="one"):
    def tr(s):
        kw = positional(s, names)
        tensors = [kw.pop(n) for n in names if n in kw]
        return Call(name, [s.input, *tensors], kw, aten(name), partial=partial)
    return tr


def linear(s):
    kw = positional(s, ["weight", "bias"])
    args = [s.input, kw.pop("weight")]
    if kw.get("bias") is not None:
        args.append(kw.pop("bias"))
    kw.pop("bias", None)
    return Call("linear", args, kw, aten("linear"), partial="one" if len(args) == 2 else "")


def view_like(name, names, list_args=(), partial="all", grad=False):
    def tr(s):
        kw = positional(s, names)
        for n in list_args:
            if n in kw:
                kw[n] = ints(kw[n])
        args = [s.input] + [kw.pop(n) for n in names if n in kw]
        return Call(name, args, kw, aten(name), partial=partial, grad=grad)
    return tr


def squeeze(s):
    kw = positional(s, ["dim"])
    args = [s.input]
    if "dim" in kw:
        args.append(ints(kw.pop("dim")))
    return Call("squeeze", args, kw, aten("squeeze"), partial="all")


def permute(s):
    dims = s.args[0] if len(s.args) == 1 and isinstance(s.args[0], (list, tuple)) else s.args
    return Call("permute", [s.input, ints(dims)], {}, aten("permute"), partial="all")


def cat_stack(name):
    def tr(s):
        kw = positional(s, ["dim"])
        return Call(name, [list(s.input), *([kw.pop("dim")] if "dim" in kw else [])], kw, aten(name),
                    partial="all")
    return tr


def split(s):
    kw = positional(s, ["split_size", "dim"])
    if not isinstance(kw["split_size"], int):  # a list of sizes is split_with_sizes
        sizes = ints(kw.pop("split_size"))
        return Call("split_with_sizes", [s.input, sizes, *([kw.pop("dim")] if "dim" in kw else [])], kw,
                    aten("split_with_sizes"), partial="all", grad=True)
    return Call("split", [s.input, kw.pop("split_size"), *([kw.pop("dim")] if "dim" in kw else [])], kw,
                aten("split"), partial="all")


def split_with_sizes(s):
    kw = positional(s, ["split_sizes", "dim"])
    return Call("split_with_sizes", [s.input, ints(kw.pop("split_sizes")), *([kw.pop("dim")] if "dim" in kw else [])],
                kw, aten("split_with_sizes"), partial="all", grad=True)


def slice_(s):
    kw = positional(s, ["dim", "start", "end", "step"])
    return Call("slice", [s.input], kw, aten("slice"), partial="all")


def pool(kind, dims):
    """nn.functional.{max,avg}_pool{1,2,3}d -> max_pool{d}d_with_indices / avg_pool{d}d."""
    def tr(s):
        if kind == "max":
            kw = positional(s, ["kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"])
            kw.pop("return_indices", None)  # ATen's op returns both; both are compared
        else:
            kw = positional(s, ["kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                                "divisor_override"])
            if dims == 1 and kw.get("divisor_override") is not None:
                raise Skip("avg_pool1d has no divisor_override in ATen", "avg_pool1d")
            drop_defaults(kw, divisor_override=None)
        for n in ("kernel_size", "stride", "padding", "dilation"):
            if n in kw:
                kw[n] = [] if kw[n] is None else ints(kw[n], dims)
        args = [s.input, kw.pop("kernel_size")]
        if kind == "max":
            name = f"max_pool{dims}d_with_indices"
            return Call(name, args, kw, aten(name), index_outputs=(1,))
        name = f"avg_pool{dims}d"
        return Call(name, args, kw, aten(name), partial="all")
    return tr


def conv(dims):
    """nn.functional.conv{1,2,3}d -> convolution (F's defaults filled in as ATen's arguments)."""
    def tr(s):
        kw = positional(s, ["weight", "bias", "stride", "padding", "dilation", "groups"])
        weight, bias = kw.pop("weight"), kw.pop("bias", None)
        stride, dilation = ints(kw.pop("stride", 1), dims), ints(kw.pop("dilation", 1), dims)
        padding = kw.pop("padding", 0)
        if padding == "valid":
            padding = 0
        elif padding == "same":  # F pads (k - 1) * dilation in all; ATen's convolution pads symmetrically
            total = [d * (k - 1) for d, k in zip(dilation, weight.shape[2:])]
            if any(t % 2 for t in total):
                raise Skip("padding='same' with an odd total runs as _convolution_mode (asymmetric)", "convolution")
            padding = [t // 2 for t in total]
        args = [s.input, weight, bias, stride, ints(padding, dims), dilation, False, [0] * dims, int(kw.pop("groups", 1))]
        return Call("convolution", args, kw, aten("convolution"), partial="one" if bias is None else "", grad=True)
    return tr


def adaptive_avg_pool(dims):
    """F.adaptive_avg_pool{1,2,3}d: output_size one value per spatial dim, gradients compared too."""
    name = f"adaptive_avg_pool{dims}d"

    def tr(s):
        size = s.args[0] if s.args else s.kwargs["output_size"]
        size = [size] * dims if isinstance(size, int) or size is None else list(size)
        # None keeps the input's size along that dim (F.adaptive_avg_pool2d/3d do this before ATen).
        size = [s.input.shape[-dims + i] if v is None else int(v) for i, v in enumerate(size)]
        return Call(name, [s.input, size], {}, aten(name), partial="all", grad=True)
    return tr


def loss(name):
    fn = {"nll_loss": F.nll_loss, "cross_entropy": F.cross_entropy}[name]

    def tr(s):
        kw = positional(s, ["target", "weight", "size_average", "ignore_index", "reduce", "reduction",
                            "label_smoothing"])
        if kw.get("size_average") is not None or kw.get("reduce") is not None:
            raise Skip("legacy size_average/reduce arguments", name)
        kw.pop("size_average", None), kw.pop("reduce", None)
        args = [s.input, kw.pop("target")]
        if kw.get("weight") is None:
            kw.pop("weight", None)
        # dtensor's losses take ATen's arguments with reduction as a string, as F's do: F is the
        # reference (ATen's nll_loss takes the reduction as an enum int).
        return Call(name, args, kw, fn)
    return tr


def embedding(s):
    kw = positional(s, ["indices"])
    if kw.get("max_norm") is not None:
        raise Skip("max_norm renormalizes the weight in place before the lookup (embedding_renorm_), "
                   "not an argument of aten.embedding", "embedding")
    kw.pop("max_norm", None), kw.pop("norm_type", None)
    if kw.get("padding_idx") is None:
        kw.pop("padding_idx", None)
    elif kw["padding_idx"] < 0:
        kw["padding_idx"] += s.input.shape[0]  # F.embedding wraps it before calling ATen
    return Call("embedding", [s.input, kw.pop("indices")], kw, aten("embedding"))


def index_select(s):
    kw = positional(s, ["dim", "index"])
    return Call("index_select", [s.input, kw.pop("dim"), kw.pop("index")], kw, aten("index_select"),
                partial="one", grad=True)


def nonzero(s):
    # as_tuple=True is torch.nonzero's Python form (aten.nonzero's columns unbound): the same ATen op.
    return Call("nonzero", [s.input], {}, aten("nonzero"))


def gather(s):
    kw = positional(s, ["dim", "index"])
    if kw.get("sparse_grad"):
        raise Skip("sparse_grad=True: torch's gradient is a sparse tensor")
    kw.pop("sparse_grad", None)
    return Call("gather", [s.input, kw.pop("dim"), kw.pop("index")], kw, aten("gather"), partial="one", grad=True)


def scatter_add(s):
    kw = positional(s, ["dim", "index", "src"])
    return Call("scatter_add", [s.input, kw.pop("dim"), kw.pop("index"), kw.pop("src")], kw, aten("scatter_add"),
                partial="all", grad=True)


def _without_masks(indices):
    """Advanced indices with each bool mask as its nonzero positions, as torch expands it (dtensor's
    index ops take int indices; the bridge expands masks the same way)."""
    out = []
    for t in indices:
        if isinstance(t, torch.Tensor) and t.dtype in (torch.bool, torch.uint8):
            out.extend(t.nonzero().unbind(1))
        else:
            out.append(t)
    while out and out[-1] is None:  # a trailing ':' indexes nothing
        out.pop()
    return out


def index_put(s):
    kw = positional(s, ["indices", "values"])
    indices, values = _without_masks(list(kw.pop("indices"))), kw.pop("values")
    return Call("index_put", [s.input, indices, values], kw, aten("index_put"), partial="all", grad=True)


def getitem(s):
    """x[key] for a key of lists, tensors, ':' and '...' (advanced indexing: index.Tensor); a key with
    a slice or an int is basic indexing (a view op), skipped."""
    key = s.args[0] if isinstance(s.args[0], tuple) else (s.args[0],)
    indices = []
    for k in key:
        if k is Ellipsis:
            indices += [None] * (s.input.dim() - (len(key) - 1))
        elif isinstance(k, (list, torch.Tensor)):
            indices.append(torch.as_tensor(k))
        elif k == slice(None):
            indices.append(None)
        else:
            raise Skip("basic indexing (a slice or an int): a view, not index.Tensor", "index.Tensor")
    indices = _without_masks(indices)
    if not any(isinstance(t, torch.Tensor) for t in indices):
        raise Skip("no index tensor in the key", "index.Tensor")
    return Call("index.Tensor", [s.input, indices], {}, aten("index"), partial="one", grad=True)


def scatter(s):
    # scatter(input, dim, index, src | value, *, reduce=None): scatter.src for a tensor src, scatter.value for a number.
    kw = positional(s, ["dim", "index", "src"])
    if kw.get("reduce") is not None:
        raise Skip("scatter with reduce= (scatter.reduce / scatter.value_reduce)", "scatter")
    kw.pop("reduce", None)
    src = kw.pop("value") if "value" in kw else kw.pop("src")
    args = [s.input, kw.pop("dim"), kw.pop("index")]
    if isinstance(src, torch.Tensor):
        return Call("scatter.src", args + [src], kw, aten("scatter"), partial="all", grad=True)
    return Call("scatter.value", args + [int(src) if isinstance(src, bool) else src], kw, aten("scatter"),
                partial="all", grad=True)


def scatter_reduce(s):
    # scatter_reduce(input, dim, index, src, reduce, *, include_self=True); gradients compared for
    # the reduces dtensor differentiates (sum, mean).
    kw = positional(s, ["dim", "index", "src", "reduce"])
    reduce = kw.pop("reduce")
    args = [s.input, kw.pop("dim"), kw.pop("index"), kw.pop("src"), reduce]
    return Call("scatter_reduce.two", args, kw, aten("scatter_reduce"), partial="all", grad=reduce in ("sum", "mean"))


def index_add(s):
    kw = positional(s, ["dim", "index", "source"])
    return Call("index_add", [s.input, kw.pop("dim"), kw.pop("index"), kw.pop("source")], kw, aten("index_add"),
                partial="all", grad=True)


def sdpa(s):
    kw = positional(s, ["key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"])
    if kw.get("dropout_p", 0.0) != 0.0:
        raise Skip("dropout_p > 0 draws random numbers: no value to compare", "scaled_dot_product_attention")
    kw = drop_defaults(kw, dropout_p=0.0, enable_gqa=False, attn_mask=None, scale=None)
    return Call("scaled_dot_product_attention", [s.input, kw.pop("key"), kw.pop("value")], kw,
                aten("scaled_dot_product_attention"))


DTYPE_NAMES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64",
               torch.int32: "int32", torch.int16: "int16", torch.int8: "int8", torch.uint8: "uint8",
               torch.bool: "bool", torch.float16: "float16",
               torch.bfloat16: "bfloat16", torch.complex64: "complex64", torch.complex128: "complex128"}


def to(s):
    # Tensor.to(device?, dtype | other, non_blocking, copy, memory_format): only the dtype changes
    # values (one cpu device; layout flags do not change them), which is aten.to.dtype.
    target = next((a.dtype if isinstance(a, torch.Tensor) else a for a in s.args
                   if isinstance(a, (torch.dtype, torch.Tensor))), s.kwargs.get("dtype"))
    if target is None:
        raise Skip("Tensor.to without a dtype (device or layout only)", "to")
    if target not in DTYPE_NAMES:
        raise Skip(f"dtype {target} is not one of dtensor's", "to")
    return Call("to", [s.input, DTYPE_NAMES[target]], {}, lambda x, d: x.to(target))


# The ops of the pointwise tables (ops/pointwise/rows.h), one name per row: forward and gradients
# against torch.
ROW_UNARY = ("acos", "asin", "atan", "sin", "cos", "tan", "sinh", "cosh", "asinh", "acosh", "atanh",
             "log1p", "expm1", "exp2", "log2", "log10", "erf", "erfc", "erfinv", "reciprocal", "rad2deg", "deg2rad", "ceil",
             "floor", "round", "trunc", "sign", "frac", "positive", "signbit", "isnan", "isinf", "logical_not",
             "bitwise_not")
ROW_BINARY = ("atan2", "hypot", "copysign", "fmod", "remainder", "nextafter", "logical_and", "logical_or",
              "logical_xor", "bitwise_and", "bitwise_or", "bitwise_xor", "logaddexp", "logaddexp2", "fmax", "fmin",
              "xlogy", "heaviside", "floor_divide", "gcd", "lcm", "bitwise_left_shift", "bitwise_right_shift")


def param_row(name, params):
    """A row with Scalar parameters (ops/pointwise/rows.h): OpInfo's positional and keyword values
    bound to ATen's parameter names; `inplace` (a functional flag) dropped; forward and gradients
    against torch's ATen op."""
    def tr(s):
        kw = drop_defaults(positional(s, params + ["inplace"]), inplace=False)
        if "inplace" in kw:
            raise Skip("in place", name)
        return Call(name, [s.input], kw, aten(name), grad=True)
    return tr


def clamp(s):
    # OpInfo's clamp samples pass tensor bounds (clamp.Tensor); dtensor's row is clamp(x, Scalar?
    # min, Scalar? max): each bound becomes a number (its first element), compared with torch.clamp
    # on the same numbers.
    def number(b):
        if b is None or not isinstance(b, torch.Tensor):
            return b
        if b.numel() == 0:
            raise Skip("an empty bound tensor", "clamp")
        return b.flatten()[0].item()
    kw = positional(s, ["min", "max"])
    lo, hi = number(kw.get("min")), number(kw.get("max"))
    if lo is None and hi is None:
        raise Skip("no bound (torch's clamp refuses it)", "clamp")
    return Call("clamp", [s.input], {"min": lo, "max": hi}, lambda x, min, max: torch.clamp(x, min, max), grad=True)


def copy_op(name, params, op=None):
    """The copies of ops/view/copy_defs.cc: OpInfo's arguments bound to ATen's names; every Partial
    input meaningful (they pass Partial through, or reduce it first where they cannot)."""
    def tr(s):
        kw = positional(s, params)
        for k, v in kw.items():
            if isinstance(v, (tuple, torch.Size)):
                kw[k] = ints(v)
            elif isinstance(v, bool):
                kw[k] = int(v)  # fill's value=True: the Scalar 1, as torch casts it
        if "memory_format" in kw:
            raise Skip("memory_format (dtensor's clone keeps the layout)", name)
        return Call(op or name, [s.input], kw, aten(name), partial="all", grad=True)
    return tr


def pad_mode(mode):
    """nn.functional.pad's reflect and replicate modes: ATen's {mode}_pad{k}d for a pad of 2k values
    (F.pad's choice; torch's own reference is that ATen op, so the two compare op for op)."""
    def tr(s):
        pad = ints(s.args[0])
        op = f"{mode}_pad{len(pad) // 2}d"
        return Call(op, [s.input], {"padding": pad}, aten(op), partial="all", grad=True)
    return tr


def interpolate(mode):
    """nn.functional.interpolate's nearest and bilinear modes on 4-d inputs: the ATen call F.interpolate
    makes (upsample_{mode}2d.default, its output size and scales worked out by torch), recorded under
    a dispatch mode, then that call on both sides."""
    op = f"upsample_{mode}2d"

    def tr(s):
        if s.input.dim() != 4:
            raise Skip(f"a {s.input.dim()}-d input is upsample_{mode}{s.input.dim() - 2}d (dtensor has the 2-d op)", op)
        from torch.utils._python_dispatch import TorchDispatchMode
        seen = []

        class Record(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                if func._schema.name == f"aten::{op}":
                    seen.append((func, args, kwargs or {}))
                return func(*args, **(kwargs or {}))

        with Record():
            torch.nn.functional.interpolate(s.input, *s.args, **s.kwargs)
        if len(seen) != 1:
            raise Skip(f"F.interpolate made {len(seen)} {op} calls", op)
        func, args, kwargs = seen[0]
        kw = {a.name: v for a, v in zip(func._schema.arguments[1:], args[1:])}
        kw.update(kwargs)
        kw = {k: (ints(v) if k.endswith("size") else v) for k, v in kw.items() if v is not None}
        # Pieces of a Partial input: nearest selects elements (every op), bilinear weights them (sum/avg).
        return Call(op, [s.input], kw, aten(op), partial="all", grad=True)
    return tr


def recorded_call(s, fn, ops, op):
    """The one call of an ATen op in `ops` (names) that fn(sample) dispatches, recorded under a
    dispatch mode: (its name, its arguments by schema name). Skip (counted under dtensor's `op`)
    when there is not exactly one."""
    from torch.utils._python_dispatch import TorchDispatchMode
    seen = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func._schema.name.split("::")[1] in ops:
                seen.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    with Record():
        fn(s.input, *s.args, **s.kwargs)
    if len(seen) != 1:
        raise Skip(f"{len(seen)} calls of {'/'.join(ops)}", op)
    func, args, kwargs = seen[0]
    bound = {a.name: v for a, v in zip(func._schema.arguments, args)}
    bound.update(kwargs)
    return func._schema.name.split("::")[1], bound


def unfold(s):
    """F.unfold: ATen's im2col, the call F.unfold makes."""
    _, b = recorded_call(s, torch.nn.functional.unfold, ["im2col"], "im2col")
    args = [b["self"], *(ints(b[k], 2) for k in ("kernel_size", "dilation", "padding", "stride"))]
    return Call("im2col", args, {}, aten("im2col"), partial="all", grad=True)


def embedding_bag(s):
    """F.embedding_bag: ATen's _embedding_bag (or _forward_only, the same op without autograd), the
    call F.embedding_bag makes; the bookkeeping outputs (offset2bag, bag_size, max_indices) exactly."""
    _, b = recorded_call(s, torch.nn.functional.embedding_bag, ["_embedding_bag", "_embedding_bag_forward_only"],
                         "_embedding_bag")
    args = [b["weight"], b["indices"], b["offsets"], bool(b.get("scale_grad_by_freq", False)), int(b.get("mode", 0)),
            bool(b.get("sparse", False)), b.get("per_sample_weights"), bool(b.get("include_last_offset", False)),
            int(b.get("padding_idx", -1) if b.get("padding_idx") is not None else -1)]
    if args[5]:
        raise Skip("sparse=True (a sparse gradient)", "_embedding_bag")
    return Call("_embedding_bag", args, {}, aten("_embedding_bag"), index_outputs=(1, 2, 3), grad=not args[3])


def batch_norm(s):
    """F.batch_norm: its native_batch_norm call as ATen's functional form,
    _native_batch_norm_legit_functional (the new running statistics as outputs, not written)."""
    _, b = recorded_call(s, torch.nn.functional.batch_norm, ["native_batch_norm"], "_native_batch_norm_legit_functional")
    if b.get("running_mean") is None or b.get("running_var") is None:
        raise Skip("no running statistics (the functional form takes them)", "_native_batch_norm_legit_functional")
    args = [b["input"], b.get("weight"), b.get("bias"), b["running_mean"], b["running_var"], bool(b["training"]),
            float(b["momentum"]), float(b["eps"])]
    return Call("_native_batch_norm_legit_functional", args, {}, aten("_native_batch_norm_legit_functional"),
                grad=True)


CDIST_MODES = {None: None, "use_mm_for_euclid_dist_if_necessary": 0, "use_mm_for_euclid_dist": 1,
               "donot_use_mm_for_euclid_dist": 2}


def cdist(s):
    """torch.cdist(x1, x2, p, compute_mode) as ATen's _cdist_forward on both sides (torch.cdist runs
    _euclidean_dist's pieces instead where it chooses the matrix-product form; _cdist_forward
    makes the same choice itself)."""
    kw = positional(s, ["x2", "p", "compute_mode"])
    mode = CDIST_MODES[kw.get("compute_mode")]
    return Call("_cdist_forward", [s.input, kw["x2"], float(kw.get("p", 2.0)), mode], {}, aten("_cdist_forward"),
                grad=True)


def pdist(s):
    """F.pdist(input, p=2) as ATen's _pdist_forward on both sides."""
    kw = positional(s, ["p"])
    return Call("_pdist_forward", [s.input, float(kw.get("p", 2.0))], {}, aten("_pdist_forward"), grad=True)


def region_scatter(name, params):
    """select_scatter / slice_scatter(self, src, ...): both tensors may be Partial (each element is one
    of theirs); gradients for both."""
    def tr(s):
        kw = positional(s, params)
        src = kw.pop("src")
        return Call(name, [s.input, src], kw, aten(name), partial="all", grad=True)
    return tr


def full_like(s):
    # full_like(input, fill_value, *, dtype=None, ...): dtensor's takes the dtype by name; layout,
    # device and memory format change no value.
    kw = positional(s, ["fill_value"])
    dtype = kw.pop("dtype", None)
    if dtype is not None:
        if dtype not in DTYPE_NAMES:
            raise Skip(f"dtype {dtype} is not one of dtensor's", "full_like")
        kw["dtype"] = DTYPE_NAMES[dtype]
    for k in ("layout", "device", "pin_memory", "memory_format", "requires_grad"):
        kw.pop(k, None)
    if isinstance(kw.get("fill_value"), bool):
        kw["fill_value"] = int(kw["fill_value"])
    return Call("full_like", [s.input], kw,
                lambda x, fill_value, dtype=None: torch.full_like(x, fill_value, dtype=dtype and {v: k for k, v in DTYPE_NAMES.items()}[dtype]),
                partial="all", grad=True)


def complexified(t):
    """A real floating sample made complex with a nonzero imaginary part (the reversed values; OpInfo's
    samples here are real: the oracle runs float32/float64/int64), so both parts are exercised."""
    if t.is_complex() or not t.is_floating_point():
        return t
    return torch.complex(t, t.flip(-1) * 0.5 - 0.25 if t.dim() else -t)


FFT_NORM = {None: 0, "backward": 0, "ortho": 1, "forward": 2}  # torch's fft_norm_mode, forward direction


def fft_dims(s, kw, ndim, default):
    """The transformed dims of a torch.fft sample: `dim` as given, else `default` (an int count of
    trailing dims, or None: all); samples with n / s (padding or trimming) are skipped."""
    if kw.get("n") is not None or kw.get("s") is not None:
        raise Skip("n / s pads or trims the input first (other ops)")
    dim = kw.get("dim")
    if dim is None:
        dims = list(range(ndim - default, ndim)) if default is not None else list(range(ndim))
    else:
        dims = [d % ndim for d in ints(dim)] if ndim else []
    if not dims or ndim == 0:
        raise Skip("a 0-d input or no dims to transform")
    return dims


def fft(kind, default):
    """torch.fft.<kind> on OpInfo's samples as the ATen op it reaches: fft/fft2/fftn of a real input
    -> _fft_r2c (two-sided), rfft* -> _fft_r2c (onesided), ifft* of a complex input -> _fft_c2c
    (inverse), irfft* -> _fft_c2r with last_dim_size 2 (m - 1). norm maps as torch's _fft_norm_mode
    (the inverse transforms swap 'backward' and 'forward')."""
    def tr(s):
        kw = positional(s, ["s" if default != 1 else "n", "dim", "norm"])
        x = s.input
        if not x.is_floating_point():
            raise Skip("an integer input: torch converts it first (another op)")
        dims = fft_dims(s, kw, x.dim(), default)
        norm = FFT_NORM[kw.get("norm")]
        if kind in ("fft", "rfft"):
            return Call("_fft_r2c", [x, dims, norm, kind == "rfft"], {}, aten("_fft_r2c"), partial="all", grad=True)
        inverse = {0: 2, 1: 1, 2: 0}[norm]
        z = complexified(x)
        if kind == "ifft":
            return Call("_fft_c2c", [z, dims, inverse, False], {}, aten("_fft_c2c"), partial="all", grad=True)
        return Call("_fft_c2r", [z, dims, inverse, 2 * (z.shape[dims[-1]] - 1) or 1], {}, aten("_fft_c2r"),
                    partial="all", grad=True)
    return tr


def complex_op(name, make_complex=True):
    """view_as_real, real, imag, conj (-> _conj), conj_physical on complexified samples; view_as_complex
    and complex take OpInfo's real samples. Linear over the reals: Partial(sum/avg) inputs pass."""
    def tr(s):
        x = complexified(s.input) if make_complex else s.input
        args = [x, *s.args]
        ref = {"_conj": lambda z: torch.conj(z).resolve_conj()}.get(name, aten(name))
        if name == "view_as_complex" and (x.dim() == 0 or x.shape[-1] != 2 or x.dtype not in (torch.float32, torch.float64)):
            raise Skip("not a [..., 2] float32/float64 input")
        if name == "complex" and (x.dtype not in (torch.float32, torch.float64) or args[1].dtype != x.dtype):
            raise Skip("complex takes two float32 or two float64 tensors")
        return Call(name, args, dict(s.kwargs), ref, partial="all", grad=True)
    return tr


def grid_sample(s):
    """F.grid_sample on a 4-d input: its grid_sampler_2d call (recorded); linear in the input."""
    _, b = recorded_call(s, torch.nn.functional.grid_sample, ["grid_sampler_2d"], "grid_sampler_2d")
    args = [b["input"], b["grid"], int(b["interpolation_mode"]), int(b["padding_mode"]), bool(b["align_corners"])]
    return Call("grid_sampler_2d", args, {}, aten("grid_sampler_2d"), partial="one", grad=True)


def grid_sampler_2d(s):
    kw = positional(s, ["grid", "interpolation_mode", "padding_mode", "align_corners"])
    args = [s.input, kw["grid"], int(kw["interpolation_mode"]), int(kw["padding_mode"]), bool(kw["align_corners"])]
    return Call("grid_sampler_2d", args, {}, aten("grid_sampler_2d"), partial="one", grad=True)


def masked_scatter(s):
    kw = positional(s, ["mask", "source"])
    return Call("masked_scatter", [s.input, kw["mask"], kw["source"]], {}, aten("masked_scatter"), partial="all",
                grad=True)


def _whole_storage(s, op):
    """Sizes and strides address the storage: only a tensor that is its whole storage compares."""
    if not s.input.is_contiguous() or s.input.storage_offset() != 0 or \
            s.input.untyped_storage().nbytes() != s.input.numel() * s.input.element_size():
        raise Skip("the input is a view into a larger storage (dtensor's tensors are their own storage)", op)


def as_strided(s):
    _whole_storage(s, "as_strided")
    kw = positional(s, ["size", "stride", "storage_offset"])
    kw = {k: (ints(v) if k != "storage_offset" else v) for k, v in kw.items() if v is not None}
    return Call("as_strided", [s.input], kw, aten("as_strided"), partial="all", grad=True)


def resize_(s):
    _whole_storage(s, "resize_")
    kw = positional(s, ["size"])
    size = ints(kw["size"])
    if math.prod(size) > s.input.numel():
        raise Skip("resize_ grows the tensor: torch leaves the new elements uninitialized", "resize_")
    return Call("resize_", [s.input, size], {}, lambda x, size: x.clone().resize_(size), partial="all")


# (OpInfo name, variant_test_name) -> translator. dtensor op names come from the Call.
TRANSLATORS = {
    **{(n, ""): unary(n, grad=True) for n in ROW_UNARY},
    **{(n, ""): binary(n, grad=True, scalar_other=False) for n in ROW_BINARY},
    **{(n, ""): unary(n) for n in ("abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid")},
    ("neg", ""): unary("neg", partial="all"),
    ("nn.functional.relu", ""): unary("relu"),
    ("nn.functional.silu", ""): silu,
    ("nn.functional.gelu", ""): gelu,
    ("add", ""): binary("add", "all"),
    ("sub", ""): binary("sub", "all"),
    ("mul", ""): binary("mul", "one"),
    ("div", "no_rounding_mode"): binary("div"),
    ("div", "trunc_rounding"): binary("div"),
    ("div", "floor_rounding"): binary("div"),
    **{(n, ""): binary(n) for n in ("maximum", "minimum", "pow", "eq", "ne", "lt", "le", "gt", "ge")},
    **{(f"fft.{k}{v}", ""): fft(k, d) for k in ("fft", "rfft", "ifft", "irfft")
       for v, d in (("", 1), ("2", 2), ("n", None))},
    ("view_as_real", ""): complex_op("view_as_real"),
    ("view_as_complex", ""): complex_op("view_as_complex", make_complex=False),
    ("real", ""): complex_op("real"),
    ("imag", ""): complex_op("imag"),
    ("conj", ""): complex_op("_conj"),
    ("conj_physical", ""): complex_op("conj_physical"),
    ("complex", ""): complex_op("complex", make_complex=False),
    ("where", ""): where,
    ("masked_fill", ""): masked_fill,
    ("sum", ""): reduction("sum", "all"),
    ("mean", ""): reduction("mean", "all"),
    ("amax", ""): reduction("amax"),
    ("amin", ""): reduction("amin"),
    ("all", ""): reduction("all"),
    ("any", ""): reduction("any"),
    ("prod", ""): reduction("prod"),
    ("logsumexp", ""): reduction("logsumexp"),
    ("var", ""): var_std("var"),
    ("var", "unbiased"): var_std("var"),
    ("std", ""): var_std("std"),
    ("std", "unbiased"): var_std("std"),
    ("max", "reduction_with_dim"): with_dim("max"),
    ("min", "reduction_with_dim"): with_dim("min"),
    ("median", ""): with_dim("median"),
    ("nanmedian", ""): with_dim("nanmedian"),
    ("kthvalue", ""): kthvalue,
    ("sort", ""): sort,
    ("topk", ""): topk,
    ("argmax", ""): argmaxmin("argmax"),
    ("argmin", ""): argmaxmin("argmin"),
    ("cumsum", ""): scan("cumsum", partial="all"),
    ("cumprod", ""): scan("cumprod"),
    ("logcumsumexp", ""): scan("logcumsumexp"),
    ("cummax", ""): scan("cummax", indices=(1,)),
    ("cummin", ""): scan("cummin", indices=(1,)),
    ("softmax", ""): softmax("softmax"),
    ("softmax", "with_dtype"): softmax("softmax"),
    ("log_softmax", ""): softmax("log_softmax"),
    ("log_softmax", "with_dtype"): softmax("log_softmax"),
    ("nn.functional.layer_norm", ""): norm("layer_norm", ["normalized_shape", "weight", "bias", "eps"]),
    ("native_layer_norm", ""): native_layer_norm,
    ("native_group_norm", ""): native_group_norm,
    ("nn.functional.rms_norm", ""): norm("rms_norm", ["normalized_shape", "weight", "eps"]),
    ("mm", ""): matrix("mm", ["mat2"]),
    ("bmm", ""): matrix("bmm", ["mat2"]),
    ("matmul", ""): matrix("matmul", ["other"]),
    ("addmm", ""): matrix("addmm", ["mat1", "mat2"], partial=""),
    ("nn.functional.linear", ""): linear,
    ("nn.functional.conv1d", ""): conv(1),
    ("nn.functional.conv2d", ""): conv(2),
    ("nn.functional.conv3d", ""): conv(3),
    ("view", ""): view_like("view", ["size"], ["size"]),
    ("reshape", ""): view_like("reshape", ["shape"], ["shape"]),
    ("flatten", ""): view_like("flatten", ["start_dim", "end_dim"]),
    ("squeeze", ""): squeeze,
    ("squeeze", "multiple"): squeeze,
    ("unsqueeze", ""): view_like("unsqueeze", ["dim"]),
    ("transpose", ""): view_like("transpose", ["dim0", "dim1"]),
    ("t", ""): view_like("t", []),
    ("permute", ""): permute,
    ("expand", ""): view_like("expand", ["size"], ["size"]),
    ("cat", ""): cat_stack("cat"),
    ("stack", ""): cat_stack("stack"),
    ("split", ""): split,
    ("split", "list_args"): split,
    ("split_with_sizes", ""): split_with_sizes,
    ("slice", ""): slice_,
    ("select", ""): view_like("select", ["dim", "index"]),
    ("diagonal", ""): view_like("diagonal", ["offset", "dim1", "dim2"], grad=True),
    **{(f"nn.functional.max_pool{d}d", ""): pool("max", d) for d in (1, 2, 3)},
    **{(f"nn.functional.avg_pool{d}d", ""): pool("avg", d) for d in (1, 2, 3)},
    **{(f"nn.functional.adaptive_avg_pool{d}d", ""): adaptive_avg_pool(d) for d in (1, 2, 3)},
    ("nn.functional.nll_loss", ""): loss("nll_loss"),
    ("nn.functional.cross_entropy", ""): loss("cross_entropy"),
    ("nn.functional.embedding", ""): embedding,
    ("nn.functional.embedding_bag", ""): embedding_bag,
    ("nn.functional.unfold", ""): unfold,
    ("nn.functional.grid_sample", ""): grid_sample,
    ("grid_sampler_2d", ""): grid_sampler_2d,
    ("masked_scatter", ""): masked_scatter,
    ("as_strided", ""): as_strided,
    ("as_strided", "partial_views"): as_strided,
    ("resize_", ""): resize_,
    ("nn.functional.batch_norm", ""): batch_norm,
    ("index_select", ""): index_select,
    ("nonzero", ""): nonzero,
    ("index_add", ""): index_add,
    ("gather", ""): gather,
    ("scatter_add", ""): scatter_add,
    ("scatter", ""): scatter,
    ("index_put", ""): index_put,
    ("__getitem__", ""): getitem,
    **{("scatter_reduce", r): scatter_reduce for r in ("sum", "prod", "mean", "amax", "amin")},
    ("nn.functional.scaled_dot_product_attention", ""): sdpa,
    ("to", ""): to,
    ("clamp", ""): clamp,
    ("clone", ""): copy_op("clone", []),
    ("flip", ""): copy_op("flip", ["dims"]),
    ("repeat", ""): copy_op("repeat", ["repeats"]),
    ("constant_pad_nd", ""): copy_op("constant_pad_nd", ["pad", "value"]),
    ("nn.functional.interpolate", "nearest"): interpolate("nearest"),
    ("nn.functional.interpolate", "bilinear"): interpolate("bilinear"),
    ("cdist", ""): cdist,
    ("nn.functional.pdist", ""): pdist,
    ("nn.functional.pad", "reflect"): pad_mode("reflection"),
    ("nn.functional.pad", "replicate"): pad_mode("replication"),
    ("nn.functional.pad", "replicate_negative"): pad_mode("replication"),
    ("fill", ""): copy_op("fill", ["value"], op="fill.Scalar"),
    ("full_like", ""): full_like,
    ("select_scatter", ""): region_scatter("select_scatter", ["src", "dim", "index"]),
    ("slice_scatter", ""): region_scatter("slice_scatter", ["src", "dim", "start", "end", "step"]),
    ("nn.functional.hardtanh", ""): param_row("hardtanh", ["min_val", "max_val"]),
    ("nn.functional.leaky_relu", ""): param_row("leaky_relu", ["negative_slope"]),
    ("nn.functional.elu", ""): param_row("elu", ["alpha"]),
    ("nn.functional.celu", ""): param_row("celu", ["alpha"]),
    ("nn.functional.softplus", ""): param_row("softplus", ["beta", "threshold"]),
    ("nn.functional.hardshrink", ""): param_row("hardshrink", ["lambd"]),
    ("nn.functional.softshrink", ""): param_row("softshrink", ["lambd"]),
}

# Ops whose indices (or extremes) are checked again on inputs with many ties (OpInfo's random
# floats rarely tie): the first occurrence for max/min/argmax/argmin and pooling, torch's choice for
# the others.
TIE_OPS = {"sort", "sort.stable", "topk", "max.dim", "min.dim", "argmax", "argmin", "median", "median.dim", "nanmedian",
           "nanmedian.dim", "kthvalue", "cummax", "cummin", "max_pool1d_with_indices",
           "max_pool2d_with_indices", "max_pool3d_with_indices", "amax", "amin"}
# Every op with a floating first input also runs with 20% NaNs in it, except these (docs/OPINFO.md):
# torch's attention gives 0 or NaN for an all-NaN score row depending on the kernel it picks.
NO_NAN_OPS = {"scaled_dot_product_attention"}


def opinfo_entries():
    """(OpInfo, translator) for every OpInfo entry that maps to dtensor ops."""
    return [(o, TRANSLATORS[(o.name, o.variant_test_name)]) for o in op_db
            if (o.name, o.variant_test_name) in TRANSLATORS]


def samples(opinfo, dtype):
    """The entry's samples for dtype, at most MAX_SAMPLES (a seeded subset where there are more); the
    first NARROW_SAMPLES for the NARROW_DTYPES."""
    if dtype in NARROW_DTYPES:
        return list(itertools.islice(opinfo.sample_inputs("cpu", dtype), NARROW_SAMPLES))
    all_samples = list(opinfo.sample_inputs("cpu", dtype))
    if len(all_samples) > MAX_SAMPLES:
        rng = random.Random(zlib.crc32(f"{opinfo.name}/{opinfo.variant_test_name}/{dtype}".encode()))
        all_samples = [all_samples[i] for i in sorted(rng.sample(range(len(all_samples)), MAX_SAMPLES))]
    return all_samples


def variants(call, seed):
    """The call on OpInfo's data; for TIE_OPS the same call on tied inputs; with NaNs in a floating
    first input (tied for TIE_OPS); for a binary
    op with a Scalar overload, the call with `other` as a Python number (OpInfo's sample_inputs
    pass tensors only)."""
    yield "", call
    if call.op in SCALAR_OVERLOAD and isinstance(call.args[1], torch.Tensor) and call.args[1].numel() > 0:
        other = call.args[1].flatten()[0].item()
        yield "scalar", dataclasses.replace(call, op=SCALAR_OVERLOAD[call.op], partial="",
                                            args=[call.args[0], other, *call.args[2:]])
        # OpInfo's reference inputs have non-finite scalars: a Partial input must not turn
        # x * inf into inf - inf (they found that).
        extreme = {"mul": float("inf"), "div": 0.0}.get(call.op)
        if extreme is not None and call.args[0].is_floating_point() and "rounding_mode" not in call.kwargs:
            yield "scalar-extreme", dataclasses.replace(call, op=SCALAR_OVERLOAD[call.op], partial="all",
                                                        args=[call.args[0], extreme, *call.args[2:]])
    x = call.args[0]
    if not isinstance(x, torch.Tensor):
        return
    g = torch.Generator().manual_seed(seed)
    if call.op in TIE_OPS:
        x = (x // 4) if not x.is_floating_point() else torch.round(x / 3)
        yield "ties", dataclasses.replace(call, args=[x, *call.args[1:]])
    if x.is_floating_point() and x.numel() > 0 and call.op not in NO_NAN_OPS:
        nan = torch.where(torch.rand(x.shape, generator=g) < 0.2, torch.full_like(x, float("nan")), x)
        yield "nan", dataclasses.replace(call, args=[nan, *call.args[1:]])


# ---- running and comparing ----------------------------------------------------------------------------

def _tensor_list(a):
    """A Tensor[] argument, or a Tensor?[] one (index.Tensor's [None, i])."""
    return isinstance(a, list) and any(isinstance(e, torch.Tensor) for e in a)


def _tensors(args):
    for a in args:
        if isinstance(a, torch.Tensor):
            yield a
        elif _tensor_list(a):
            yield from (e for e in a if isinstance(e, torch.Tensor))


def _with_tensors(args, it):
    """args with each tensor (in lists too; None entries kept) replaced by the next of `it`."""
    return [next(it) if isinstance(a, torch.Tensor) else
            [next(it) if isinstance(e, torch.Tensor) else e for e in a] if _tensor_list(a) else a for a in args]


def input_tensors(call):
    """The call's tensors in the order they are distributed: positional (lists flattened), then keyword."""
    return list(_tensors(call.args)) + [v for v in call.kwargs.values() if isinstance(v, torch.Tensor)]


def random_placements(call, rng, mesh_ndim=2):
    """Seeded placements for each tensor input (in argument order): Shard on a dim of size >= 1,
    Replicate, or Partial (not for bool tensors). Returns the placements and, per tensor, whether
    its Partial(sum/avg) pieces may be adversarial: only where the op is linear in it (call.partial),
    since pieces that only sum to the value up to rounding would break exact ties elsewhere;
    Partial(max/min) pieces are exact and always adversarial."""
    tensors = input_tensors(call)
    linear_budget = {"all": len(tensors), "one": 1}.get(call.partial, 0)
    out, adversarial = [], []
    for t in tensors:
        pl = []
        # A tensor's Partial mesh dims share one reduce op (DTensorSpec); avg of ints is not exact.
        # Complex numbers have no order: no Partial(max/min) for them.
        reduce_op = rng.choice(["sum", "avg"] if t.is_complex() else ["sum", "avg", "max", "min"] if t.is_floating_point()
                               else ["sum", "max", "min"])
        for _ in range(mesh_ndim):
            dims = [d for d in range(t.dim()) if t.shape[d] >= 1]
            r = rng.random()
            if r < 0.2 and t.dtype != torch.bool:
                pl.append(Partial(reduce_op))
            elif r < 0.65 and dims:
                pl.append(Shard(rng.choice(dims)))
            else:
                pl.append(Replicate())
        linear = any(p.is_partial() for p in pl) and reduce_op in ("sum", "avg") and linear_budget > 0
        linear_budget -= linear
        out.append(pl)
        adversarial.append(linear or reduce_op in ("max", "min"))
    return out, adversarial


def _np(t):
    return np.array(t.detach().resolve_conj().numpy(), copy=True, order="C")  # keeps 0-d (ascontiguousarray does not)


def partial_pieces(block, placements, coord, mesh_shape, seed):
    """This rank's local value of a Partial tensor whose blocks (the Replicate-on-Partial-dims
    layout) are `block`: adversarial pieces that reduce to the block over each Partial mesh dim
    (DESIGN §4), not the value on one rank and the identity on the others. sum/avg: pieces of both
    signs; max/min: one rank of each group (a seeded pick per element) holds the value, the others
    a lower (max) or higher (min) one."""
    g = np.random.default_rng(seed)  # the same draws on every rank of a group: same block shape
    dims = [i for i, p in enumerate(placements) if p.is_partial()]
    op = placements[dims[0]].reduce_op
    n = int(np.prod([mesh_shape[i] for i in dims]))
    floating = np.issubdtype(block.dtype, np.inexact)  # complex too (sum/avg only)
    if op in ("max", "min"):
        keep = np.ones(block.shape, dtype=bool)
        for i in dims:
            keep &= g.integers(0, mesh_shape[i], block.shape) == coord[i]
        delta = g.integers(1, 4, block.shape)
        if np.issubdtype(block.dtype, np.integer) and block.dtype.itemsize < 8:
            # Not past the dtype's ends (uint8's 0 less 1 is 255): a value at an end stays (a tie).
            info = np.iinfo(block.dtype)
            other = np.clip(block.astype(np.int64) + (-delta if op == "max" else delta), info.min, info.max)
        else:
            delta = delta.astype(block.dtype)
            other = block - delta if op == "max" else block + delta
        return np.where(keep, block, other).astype(block.dtype)
    if op == "avg":
        local = block.astype(np.complex128 if np.iscomplexobj(block) else np.float64)
    elif floating:
        local = block.astype(np.complex128 if np.iscomplexobj(block) else np.float64) / n
    else:
        local = block * int(all(coord[i] == 0 for i in dims))
    for i in dims:
        m = mesh_shape[i]
        r = g.uniform(-2, 2, block.shape) if floating else g.integers(-5, 6, block.shape)
        if np.iscomplexobj(block):
            r = r + 1j * g.uniform(-2, 2, block.shape)
        local = local + ((m - 1) if coord[i] == 0 else -1) * r  # the m pieces' offsets sum to 0
    return np.asarray(local).astype(block.dtype)


def run_dtensor(call, mesh_shape, placements, seed=0, adversarial=None):
    """Runs the call on prod(mesh_shape) thread ranks; returns rank 0's outputs as numpy arrays and
    dtensor dtype names, or raises the DTensorError every rank raised."""
    arrays = [_np(t) for t in _tensors(call.args)]
    kw_arrays = {k: _np(v) for k, v in call.kwargs.items() if isinstance(v, torch.Tensor)}

    def fn(world):
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        it = iter(enumerate(zip(arrays + list(kw_arrays.values()), placements)))

        def dist():
            k, (a, pl) = next(it)
            if not any(p.is_partial() for p in pl) or not (adversarial and adversarial[k]):
                return dtensor.distribute_tensor(a, mesh, pl)  # Partial: the value on coordinate 0
            base = [Replicate() if p.is_partial() else p for p in pl]
            block = dtensor.distribute_tensor(a, mesh, base).to_local()
            local = partial_pieces(block, pl, mesh.get_coordinate(), mesh_shape, seed * 31 + k)
            return dtensor.DTensor.from_local(local, mesh, pl, shape=list(a.shape))

        def value(v):  # a ScalarType travels by name, as `to` takes it
            return DTYPE_NAMES.get(v, str(v)) if isinstance(v, torch.dtype) else v

        args = []
        for a in call.args:
            if isinstance(a, torch.Tensor):
                args.append(dist())
            elif _tensor_list(a):
                args.append([dist() if isinstance(e, torch.Tensor) else e for e in a])
            else:
                args.append(value(a))
        kwargs = {k: (dist() if k in kw_arrays else value(v)) for k, v in call.kwargs.items()}
        out = dtensor.ops.call(call.op, *args, **kwargs)
        outs = list(out) if isinstance(out, tuple) else [out]
        return [(o.full_tensor(), o.dtype, o.shape) for o in outs]

    return dtensor.run_threads(int(np.prod(mesh_shape)), fn)[0]


def run_dtensor_grads(call, mesh_shape, placements, weight):
    """Gradients of sum(op(inputs) * weight) with respect to the floating tensor inputs (positional
    only), on prod(mesh_shape) thread ranks, as full tensors (None where no gradient)."""
    arrays = [_np(t) for t in _tensors(call.args)]

    def fn(world):
        mesh = dtensor.init_device_mesh("cpu", mesh_shape)
        ins = []
        for a, pl in zip(arrays, placements):
            t = dtensor.distribute_tensor(a, mesh, pl)
            ins.append(t.requires_grad_() if np.issubdtype(a.dtype, np.inexact) else t)
        args = _with_tensors(call.args, iter(ins))
        out = dtensor.ops.call(call.op, *args, **call.kwargs)
        if isinstance(out, (tuple, list)):
            out = out[0]  # (values, indices): the values carry the gradient
        w = dtensor.distribute_tensor(weight, mesh, [Replicate()] * len(mesh_shape))
        if out.dtype.startswith("complex"):  # the loss over the real pairs stays real
            out = dtensor.ops.call("view_as_real", out)
        dtensor.ops.call("sum", dtensor.ops.call("mul", out, w)).backward()
        return [t.grad.full_tensor() if t.requires_grad and t.grad is not None else None for t in ins]

    return dtensor.run_threads(int(np.prod(mesh_shape)), fn)[0]


def grad_check(call, seed):
    """'' when dtensor's gradients (1 rank, and sharded with seeded Shard/Replicate placements) equal
    torch's autograd on the same loss, else what differs; None when torch has no gradient for it."""
    ins = [t.detach().clone().requires_grad_(t.is_floating_point() or t.is_complex()) for t in _tensors(call.args)]
    args = _with_tensors(call.args, iter(ins))
    try:
        out = call.ref(*args, **call.kwargs)
        if isinstance(out, (tuple, list)):
            out = out[0]  # (values, indices): the values carry the gradient
        out = torch.view_as_real(out) if out.is_complex() else out  # complex: the loss over the real pairs
        weight = torch.from_numpy(np.random.default_rng(seed).uniform(-2, 2, tuple(out.shape)))
        (out * weight).sum().backward()
    except (RuntimeError, NotImplementedError):
        return None  # torch defines no derivative here (nextafter): nothing to compare with
    want = [t.grad for t in ins]
    rng = random.Random(seed)
    sharded = [[Replicate() if p.is_partial() else p for p in pl] for pl in random_placements(call, rng)[0]]
    for mesh_shape, pl in (((1,), [[Replicate()] for _ in ins]), ((2, 2), sharded)):
        got = run_dtensor_grads(call, mesh_shape, pl, _np(weight))
        for k, (g, w) in enumerate(zip(got, want)):
            if w is None:
                continue
            if g is None:
                return f"input {k}: no gradient, torch has one (mesh {mesh_shape})"
            wn = w.resolve_conj().numpy()  # torch's gradient of a conjugating op may carry the conj bit
            if not np.allclose(g, wn, rtol=1e-7, atol=1e-10, equal_nan=True):
                bad = np.argwhere(~np.isclose(g, wn, rtol=1e-7, atol=1e-10, equal_nan=True))[0].tolist()
                return (f"input {k} gradient on mesh {mesh_shape} {pl}: {g[tuple(bad)]!r} at {bad}, "
                        f"torch {wn[tuple(bad)]!r}")
    return ""


def reference(call):
    with warnings.catch_warnings():  # e.g. var's "degrees of freedom <= 0": the sample means it
        warnings.simplefilter("ignore")
        out = call.ref(*call.args, **call.kwargs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [o for o in outs]


def tied_index_ok(call, idx, values):
    """Whether every index picks an element equal to the value returned with it (NaN too)."""
    x = call.args[0]
    dim = call.args[2] if len(call.args) > 2 else call.kwargs.get("dim", -1)
    keep = call.kwargs.get("keepdim", call.args[3] if len(call.args) > 3 else False)
    keep = keep or call.op in ("sort", "sort.stable", "topk")  # indices as many dims as x
    if x.dim() == 0:
        return bool((torch.from_numpy(idx) == 0).all())
    i = torch.from_numpy(idx)
    picked = x.gather(dim, i if keep else i.unsqueeze(dim))
    picked = picked if keep else picked.squeeze(dim)
    v = torch.from_numpy(values)
    return bool(((picked == v) | (picked.isnan() & v.isnan())).all())


def compare(got, want, call, local=None):
    """'' when got (dtensor's outputs) matches want (torch's), else what differs. `local`: dtensor's
    1-rank outputs, which sharded indices must equal exactly (DESIGN §6). A call whose indices
    differ from torch's only among tied values (any_tied_index) gives 'tie'."""
    tie = ""
    if len(got) != len(want):
        return f"{len(got)} outputs, torch has {len(want)}"
    for i, ((arr, dt, shape), w) in enumerate(zip(got, want)):
        wn = w.detach().resolve_conj().numpy()
        if tuple(shape) != tuple(w.shape) or arr.shape != wn.shape:
            return f"output {i}: shape {tuple(shape)}, torch {tuple(w.shape)}"
        if dt != DTYPE_NAMES.get(w.dtype, str(w.dtype)):
            return f"output {i}: dtype {dt}, torch {w.dtype}"
        if i in call.index_outputs:
            if not np.array_equal(arr, wn) and call.any_tied_index and tied_index_ok(call, arr, got[0][0]):
                tie = "tie"
            elif not np.array_equal(arr, wn):
                bad = np.argwhere(arr != wn)[0].tolist()
                return f"output {i} (indices): {arr[tuple(bad)]} at {bad}, torch {wn[tuple(bad)]}"
            if local is not None and not np.array_equal(arr, local[i][0]):
                return f"output {i} (indices): differ from the 1-rank result"
            continue
        if w.is_floating_point() or w.is_complex():
            rtol, atol = TOL.get(w.dtype, (1e-3, 1e-3))
            nan_a, nan_w = np.isnan(arr), np.isnan(wn)
            if not np.array_equal(nan_a, nan_w):
                bad = np.argwhere(nan_a != nan_w)[0].tolist()
                return f"output {i}: NaN positions differ, e.g. at {bad}: {arr[tuple(bad)]} vs torch {wn[tuple(bad)]}"
            close = np.isclose(arr, wn, rtol=rtol, atol=atol, equal_nan=True)
            if not close.all():
                bad = np.argwhere(~close)[0].tolist()
                return f"output {i}: {arr[tuple(bad)]!r} at {bad}, torch {wn[tuple(bad)]!r} (rtol {rtol}, atol {atol})"
        elif not np.array_equal(arr, wn):
            bad = np.argwhere(arr != wn)[0].tolist()
            return f"output {i}: {arr[tuple(bad)]!r} at {bad}, torch {wn[tuple(bad)]!r}"
    return tie


@dataclasses.dataclass
class Outcome:
    op: str
    status: str        # "pass", "tie", "rejected", "skipped", "mismatch-local", "mismatch-sharded"
    detail: str = ""   # reason, rejection message or mismatch
    sharded_ok: bool = False


def run_sample(call, seed):
    """Runs one call (a) locally and (b) sharded; returns an Outcome."""
    try:
        want = reference(call)
    except Exception as e:  # noqa: BLE001 - torch rejects the sample: nothing to compare with
        return Outcome(call.op, "skipped", f"torch raises {type(e).__name__}")
    try:
        local = run_dtensor(call, (1,), [[Replicate()] for _ in input_tensors(call)])
    except dtensor.DTensorError as e:
        return Outcome(call.op, "rejected", str(e).split("\n")[0])
    diff = compare(local, want, call)
    if diff and diff != "tie":
        return Outcome(call.op, "mismatch-local", diff)
    placements, adversarial = random_placements(call, random.Random(seed))
    try:
        sharded = run_dtensor(call, (2, 2), placements, seed, adversarial)
    except dtensor.DTensorError as e:
        return Outcome(call.op, "mismatch-sharded", f"{placements}: raises {str(e).splitlines()[0]}")
    diff = compare(sharded, want, call, local) or diff
    if diff and diff != "tie":
        return Outcome(call.op, "mismatch-sharded", f"{placements}: {diff}")
    # "tie": both runs agree with torch up to its unspecified choice among tied values.
    return Outcome(call.op, diff or "pass", sharded_ok=True)


def describe(call):
    def d(v):
        if isinstance(v, torch.Tensor):
            return f"T{list(v.shape)}:{DTYPE_NAMES.get(v.dtype, v.dtype)}"
        if isinstance(v, list) and v and isinstance(v[0], torch.Tensor):
            return "[" + ", ".join(d(e) for e in v) + "]"
        return repr(v)
    return f"{call.op}({', '.join([d(a) for a in call.args] + [f'{k}={d(v)}' for k, v in call.kwargs.items()])})"


def run_all():
    """Every translatable OpInfo sample: yields (dtensor op or OpInfo name, Outcome, description)."""
    for opinfo, tr in opinfo_entries():
        supported = opinfo.supported_dtypes("cpu")
        # An entry with complex kernels only (view_as_real, imag) runs on complex samples.
        dtypes = DTYPES + NARROW_DTYPES if any(d in supported for d in DTYPES) else COMPLEX_DTYPES
        for dtype in dtypes:
            entry = f"{opinfo.name}{'/' + opinfo.variant_test_name if opinfo.variant_test_name else ''}"
            if dtype not in supported:
                continue  # torch has no such kernel: not a dtensor sample
            for n, s in enumerate(samples(opinfo, dtype)):
                seed = zlib.crc32(f"{entry}/{dtype}/{n}".encode())
                try:
                    call = tr(s)
                except Skip as e:
                    yield entry, Outcome(e.op or entry, "skipped", str(e)), entry
                    continue
                for tag, c in variants(call, seed):
                    o = run_sample(c, seed)
                    if c.grad and not tag and dtype in (torch.float64, torch.complex128) and o.status == "pass":
                        diff = grad_check(c, seed)
                        if diff:
                            o = Outcome(c.op, "mismatch-grad", diff)
                    yield entry, o, f"{describe(c)} [{DTYPE_NAMES[dtype]}{' ' + tag if tag else ''}]"
