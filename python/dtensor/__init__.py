"""dtensor: tensor-parallel DTensors with torch.distributed.tensor's names, in native code.

The extension module _dtensor is built by Bazel (`bazel build //python/...`); in a checkout it is
found under bazel-bin, beside this package's sources.
"""
import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
_built = _os.path.join(_here, "..", "..", "bazel-bin", "python", "dtensor")
if not _os.path.exists(_os.path.join(_here, "_dtensor.so")) and _os.path.isdir(_built):
    __path__.append(_built)  # the package's modules live in two folders: sources and build output



def _choose_blas_kernels():
    """Debian 12's OpenBLAS picks its kernels when the library loads, from the CPU model, and falls
    back to the SSE3 ones on CPUs newer than its release (sgemm 3 to 5x slower; kernels/cpu/blas_core.h).
    It reads $OPENBLAS_CORETYPE then: set it from the CPU's features before the extension loads the
    library, unless the user set it. The `dtensor` binary does the same by re-executing itself."""
    if "OPENBLAS_CORETYPE" in _os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return
    if {"avx512f", "avx512bw", "avx512vl"} <= set(flags):
        _os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif {"avx2", "fma"} <= set(flags):
        _os.environ["OPENBLAS_CORETYPE"] = "Haswell"


_choose_blas_kernels()

from ._dtensor import (  # noqa: E402
    _explain_json,
    DTensor,
    DTensorCommError,
    DTensorError,
    DeviceMesh,
    Partial,
    Placement,
    Replicate,
    Shard,
    World,
    destroy_process_group as _destroy_process_group,
    distribute_tensor as _distribute_array,
    get_array_library,
    init_device_mesh,
    init_process_group,
    is_initialized,
    ops,
    run_threads,
    set_array_library,
)

# The extension's DTensor.from_local (any DLPack array -> dtensor.DTensor), kept before the Python one
# below replaces it: torch_interop and the bridge build native DTensors over torch blocks with it.
_native_from_local = DTensor.from_local

from . import torch_interop as _torch_interop  # noqa: E402  (torch is imported on first use)
from .torch_interop import from_torch, to_torch  # noqa: E402

__all__ = [
    "DTensor", "DTensorCommError", "DTensorError", "DeviceMesh", "Partial", "Placement",
    "Replicate", "Shard", "World", "allreduce_data_parallel_grads", "apply_plan", "destroy_process_group",
    "distribute_tensor", "exit_process", "explain", "export_graph", "from_torch", "get_array_library",
    "GraphImportError", "init_device_mesh", "init_process_group", "is_initialized", "ops", "parallelize_plan",
    "plan", "run_threads", "set_array_library", "to_torch",
    "ones", "zeros", "empty", "full", "rand", "randn", "arange", "linspace", "logspace", "eye", "scalar_tensor",
    "empty_strided", "empty_permuted", "randint", "randperm", "tril_indices", "triu_indices",
]

# Public names print as dtensor.X (as torch's do), not as the private extension module's.
for _name in ("DTensor", "DTensorCommError", "DTensorError", "DeviceMesh", "Placement", "World"):
    globals()[_name].__module__ = "dtensor"


def _op_by_name(name):
    """dtensor.ops.<aten name>: the registered op of that name, or its overloads (ops.call)."""
    if name.startswith("__"):
        raise AttributeError(name)
    known = ops.names()
    if name not in known and not any(n.startswith(name + ".") for n in known):
        raise AttributeError(f"dtensor.ops has no op '{name}'; registered ops: dtensor.ops.names()")

    def op(*args, **kwargs):
        return ops.call(name, *args, **kwargs)

    op.__name__ = op.__qualname__ = name
    setattr(ops, name, op)  # resolved once: later lookups find it without listing the registry
    return op


ops.__getattr__ = _op_by_name  # PEP 562: names the extension does not bind resolve here


# Python operators on the native DTensor, as torch.distributed.tensor's DTensor has them: each is the
# registered op (recorded for autograd like a dtensor.ops call); a number is the Scalar overload's
# argument. `number / x` has no exact op (reciprocal then multiply rounds twice) and stays a TypeError.
def _operand_error(op, other):
    return TypeError(f"DTensor {op} {type(other).__name__}: accepted operands are DTensors and Python numbers; "
                     f"distribute an array first (dtensor.distribute_tensor)")


def _scalar_or_tensor(symbol, tensor_op, scalar_op):
    def method(self, other):
        if isinstance(other, DTensor):
            return ops.call(tensor_op, self, other)
        if isinstance(other, (bool, int, float)):
            return ops.call(scalar_op, self, other)
        raise _operand_error(symbol, other)
    return method


def _sub(self, other):
    if isinstance(other, DTensor):
        return ops.call("sub", self, other)
    if isinstance(other, (bool, int, float)):
        return ops.call("add.Scalar", self, -other)  # x - c == x + (-c) in IEEE arithmetic
    raise _operand_error("-", other)


def _rsub(self, other):
    if isinstance(other, (bool, int, float)):
        return ops.call("add.Scalar", ops.call("neg", self), other)  # c - x == (-x) + c
    raise _operand_error("-", other)


def _matmul(self, other):
    if isinstance(other, DTensor):
        return ops.call("matmul", self, other)
    raise _operand_error("@", other)


DTensor.__add__ = DTensor.__radd__ = _scalar_or_tensor("+", "add", "add.Scalar")
DTensor.__mul__ = DTensor.__rmul__ = _scalar_or_tensor("*", "mul", "mul.Scalar")
DTensor.__truediv__ = _scalar_or_tensor("/", "div", "div.Scalar")
DTensor.__sub__, DTensor.__rsub__ = _sub, _rsub
DTensor.__neg__ = lambda self: ops.call("neg", self)
DTensor.__matmul__ = DTensor.__rmatmul__ = _matmul
DTensor.__array_ufunc__ = None  # numpy defers to the methods above (array + DTensor: the TypeError)


# One DTensor per use (docs/PYTHON.md): torch tensors in, torch tensors out. A torch tensor handed to
# distribute_tensor or DTensor.from_local gives a dtensor.bridge.DTensor, a torch.Tensor subclass that
# torch functions, operators and autograd accept, as torch.distributed.tensor's DTensor is; a numpy
# array (any other DLPack array) gives the native dtensor.DTensor, whose ops are dtensor.ops. The
# bridge tensor's to_dtensor() is the native one over the same block.
def _placements_or_replicate(device_mesh, placements, fn):
    """`placements` as a list, or torch.distributed.tensor's default: Replicate on every mesh dim.
    Raises DTensorError for a missing mesh (dtensor has no default mesh)."""
    if device_mesh is None:
        raise DTensorError(f"{fn}: device_mesh is required (dtensor has no default mesh); accepted: a "
                           f"dtensor.DeviceMesh from dtensor.init_device_mesh")
    return [Replicate()] * device_mesh.ndim if placements is None else list(placements)


def _is_torch_tensor(x):
    torch = _sys.modules.get("torch")  # not imported here: a torch tensor exists only where torch is
    return torch is not None and isinstance(x, torch.Tensor)


def distribute_tensor(tensor, device_mesh, placements=None):
    """`tensor` (the same on every rank) laid out over `device_mesh` as `placements` (a list with one
    Placement per mesh dim; default Replicate on each). No communication: every rank keeps its block.

    A torch.Tensor gives a dtensor.bridge.DTensor (a torch.Tensor subclass; a leaf that requires grad
    when `tensor` does; its block is a copy). Anything else (numpy, DLPack) gives a dtensor.DTensor
    viewing `tensor`'s memory. Raises DTensorError for placements that do not fit the mesh or shape.
    """
    if _is_torch_tensor(tensor):
        from . import torch_bridge
        return torch_bridge.distribute(tensor, device_mesh, placements)
    placements = _placements_or_replicate(device_mesh, placements, "distribute_tensor")
    return _distribute_array(tensor, device_mesh, placements)


def _from_local(local_tensor, device_mesh, placements=None, *, shape=None, run_check=False, stride=None):
    """A DTensor from this rank's block (no copy). `shape` is the global shape, computed from every
    rank's block size (collective) when not given; `run_check` and `stride` are accepted for
    torch.distributed.tensor's signature (blocks are always checked against `shape`; strides are
    contiguous). A torch.Tensor gives a dtensor.bridge.DTensor (differentiable: `local_tensor` gets
    its block of the gradient), anything else a dtensor.DTensor."""
    if _is_torch_tensor(local_tensor):
        from . import torch_bridge
        return torch_bridge.from_local(local_tensor, device_mesh, placements, shape)
    placements = _placements_or_replicate(device_mesh, placements, "DTensor.from_local")
    return _native_from_local(local_tensor, device_mesh, placements, None if shape is None else list(shape))


DTensor.from_local = staticmethod(_from_local)


_FACTORIES = ("ones", "zeros", "empty", "full", "rand", "randn", "arange", "linspace", "logspace", "eye",
              "scalar_tensor", "empty_strided", "empty_permuted", "randint", "randperm", "tril_indices", "triu_indices")


def __getattr__(name):
    """dtensor.bridge (torch_bridge.py) imports torch, so it loads on first use only; so do the
    factories (dtensor.ones, zeros, empty, full, rand, randn as torch.distributed.tensor's, and
    torch's arange, linspace, ... with a mesh: python/dtensor/factories.py; bridge
    tensors, docs/PYTHON.md)."""
    if name in _FACTORIES:
        from . import factories

        globals()[name] = getattr(factories, name)
        return globals()[name]
    if name == "bridge":
        from . import torch_bridge

        globals()["bridge"] = torch_bridge
        return torch_bridge
    raise AttributeError(f"module 'dtensor' has no attribute '{name}'")


def explain(request, hardware="h100-nvlink"):
    """The sharding engine's decision for one op call, as `dtensor explain` gives it.

    request: a dict such as {"mesh": [4], "op": "mm", "args": [{"shape": [8, 16], "placements":
    ["S(0)"]}, {"shape": [16, 8]}]} ("run": True also executes it on thread ranks and compares
    with one device). Returns the answer as a dict: output and input placements, collectives with
    bytes per rank, the cost model's estimate in us. Raises DTensorError with the engine's message
    when the request is rejected.
    """
    import json

    answer = json.loads(_explain_json(json.dumps(request), hardware))
    if "error" in answer:
        raise DTensorError(answer["error"])
    return answer


def destroy_process_group():
    """Closes this process's Gloo group (a later init_device_mesh starts a new one)."""
    _torch_interop._meshes.clear()  # from_torch's cached meshes hold the group
    _destroy_process_group()


def exit_process(code=0):
    """Ends this process rank without the interpreter's teardown: closes dtensor's Gloo group and,
    when torch.distributed is initialized, torch's process groups; flushes stdout and stderr; then
    os._exit(code). Other atexit handlers do not run.

    Why: torch's Gloo worker threads free a finished collective's tensors after the call has
    returned. When a worker does that once the interpreter is finalizing (a busy machine can delay
    it that long), dropping the tensor's Python object needs the GIL, the interpreter ends the thread
    instead, the unwind crosses a noexcept destructor and std::terminate aborts the rank:
    "terminate called without an active exception", exit status -6 (pytorch/pytorch#190489; the
    backtrace is in docs/PYTHON.md, "Ending a job that uses torch.distributed too"). Call it last,
    after every rank's collectives have completed.

    code: the exit status, an int in [0, 255]; anything else raises ValueError before anything is
    closed."""
    if isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255:
        raise ValueError(f"exit_process: code must be an int in [0, 255], got {code!r}")
    destroy_process_group()
    dist = _sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    for stream in (_sys.stdout, _sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken: nothing more can be written there
            pass
    _os._exit(code)


from .planning import GraphImportError, export_graph, plan  # noqa: E402
from .apply import allreduce_data_parallel_grads, apply_plan, parallelize_plan  # noqa: E402  (torch on first use)

# A process rank's Gloo group is closed before the interpreter tears down the extension.
import atexit as _atexit  # noqa: E402

_atexit.register(destroy_process_group)
