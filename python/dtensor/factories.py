# dtensor's factories: bridge tensors (dtensor.bridge.DTensor) made from nothing, laid out over a
# mesh as `placements` (default Replicate on every mesh dim; Shard any dim, uneven included; Partial
# refused), each rank computing only its block. arange, empty, empty_strided, full, rand, randn,
# randperm and scalar_tensor (the Core ATen factories) are the engine's registered factory ops
# (ops/factory/, run by dispatch/factory.h's call_factory through dtensor.ops.call_factory); the others
# are made here in Python. ones, zeros, empty, full, rand and randn are
# torch.distributed.tensor's (same names and signatures); arange, linspace, logspace, eye,
# scalar_tensor, empty_strided, empty_permuted, randint, randperm, tril_indices and triu_indices are torch's
# factories of those names with `device_mesh` and `placements` added, whose values equal torch's
# (tests/python/test_bridge_factories.py, and op_db's factory entries in tests/python/test_opdb.py).
# Errors are DTensorError (UnsupportedOpError for what dtensor does not do) naming the factory.
import torch

from . import _dtensor, _placements_or_replicate
from ._dtensor import DTensorError, Replicate
from .torch_bridge import DTensor, UnsupportedOpError, _b, _dtype_name

def _factory(fn, size, fill, dtype, layout, device_mesh, placements, requires_grad, block=None):
    """A bridge tensor of global `size` laid out as `placements`, each rank allocating only its block
    (fill(block shape, dtype) makes it; or block(spec, dtype), given the layout with the block's
    global offset), as torch.distributed.tensor's factories do."""
    placements = _strided_placements(fn, device_mesh, placements, layout)
    size = _size(size)
    if not all(isinstance(n, int) and n >= 0 for n in size):
        raise DTensorError(f"{fn}: size {tuple(size)}; accepted: non-negative ints")
    if any(p.is_partial() for p in placements):
        raise DTensorError(f"{fn}: placements {placements}; accepted: Shard and Replicate (a value made on "
                           f"every rank of a Partial would be reduced over them)")
    dtype = dtype or torch.get_default_dtype()
    base = _b.spec_of(_dtensor.distribute_tensor(torch.zeros(1, dtype=dtype), device_mesh,
                                                 [Replicate()] * device_mesh.ndim))
    spec = base.with_(list(placements), list(size), _dtype_name(dtype))
    local = fill(tuple(spec.local_shape), dtype) if block is None else block(spec, dtype)
    return DTensor(local, spec, device_mesh, requires_grad=requires_grad)


def _engine_factory(fn, op, args, kwargs, dtype, layout, device_mesh, placements, requires_grad):
    """The registered factory op `op` (ops/factory/: no tensor input) laid out over `device_mesh` as
    `placements` (default Replicate), each rank computing only its block (dispatch/factory.h's
    call_factory, which refuses Partial and the Shards the op cannot make, naming what it accepts).
    Errors are DTensorError naming the factory, then the engine's call."""
    placements = _strided_placements(fn, device_mesh, placements, layout)
    if dtype is not None:
        kwargs = {**kwargs, "dtype": _dtype_name(dtype)}
    try:
        d = _dtensor.ops.call_factory(op, list(args), kwargs, device_mesh, placements)
    except DTensorError as e:
        raise DTensorError(f"{fn}: {e}") from None
    return DTensor(_b.local_of(d), _b.spec_of(d), device_mesh, requires_grad=requires_grad)


def _strided_placements(fn, device_mesh, placements, layout):
    """`placements` (default Replicate) checked against `device_mesh`; a layout other than strided refused."""
    placements = _placements_or_replicate(device_mesh, placements, fn)
    if layout not in (None, torch.strided):
        raise UnsupportedOpError(f"{fn}: layout {layout}; accepted: torch.strided")
    return placements


def _size(size):
    """A factory's size: ints, or one sequence of them."""
    if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
        size = size[0]
    return tuple(size)


def _mesh_philox_key(fn, device_mesh):
    """(seed, offset) of a random factory on `device_mesh`: torch_bridge._philox_key's (the mesh's
    agreed seed, the per-call offset), so dtensor.rand draws what rand_like of a tensor of that shape
    on the mesh draws, and the sequence of offsets is the one the bridge's random ops advance."""
    from .torch_bridge import _philox_key
    n = len(_placements_or_replicate(device_mesh, None, fn))
    anchor = _dtensor.ops.call_factory("full", [[1], 0], {}, device_mesh, [Replicate()] * n)
    return _philox_key(DTensor(_b.local_of(anchor), _b.spec_of(anchor), device_mesh))


def _filled(value):
    return lambda shape, dtype: torch.full(shape, value, dtype=dtype)


def ones(*size, requires_grad=False, dtype=None, layout=torch.strided, device_mesh=None, placements=None):
    """torch.distributed.tensor.ones: ones of global shape `size` (ints or one sequence), each rank
    making its block only; placements default Replicate. Raises DTensorError for a missing mesh, a
    negative size or a Partial placement."""
    return _factory("ones", size, _filled(1), dtype, layout, device_mesh, placements, requires_grad)


def zeros(*size, requires_grad=False, dtype=None, layout=torch.strided, device_mesh=None, placements=None):
    """torch.distributed.tensor.zeros (see ones)."""
    return _factory("zeros", size, _filled(0), dtype, layout, device_mesh, placements, requires_grad)


def empty(*size, requires_grad=False, dtype=None, layout=torch.strided, device_mesh=None, placements=None):
    """torch.distributed.tensor.empty: the registered op empty.memory_format (ops/factory/), whose
    blocks are zeros (see ones)."""
    return _engine_factory("empty", "empty.memory_format", [_size(size)], {}, dtype or torch.get_default_dtype(),
                           layout, device_mesh, placements, requires_grad)


def full(size, fill_value, *, requires_grad=False, dtype=None, layout=torch.strided, device_mesh=None,
         placements=None):
    """torch.distributed.tensor.full: `fill_value` everywhere (the registered op full, ops/factory/);
    dtype as torch infers it (bool, int64, or the default floating dtype for a float)."""
    if dtype is None and isinstance(fill_value, float):
        dtype = torch.get_default_dtype()
    return _engine_factory("full", "full", [tuple(size), fill_value], {}, dtype, layout, device_mesh, placements,
                           requires_grad)


def _drawn(fn, size, dtype, layout, device_mesh, placements, requires_grad):
    """rand / randn: the registered op of that name (ops/factory/) with the mesh's Philox key, each
    block its slice of the one-device draw (the values rand_like / randn_like give on the mesh)."""
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point:  # before the key: a refused call advances no offset
        raise DTensorError(f"{fn}: dtype {dtype}; accepted: a floating dtype")
    seed, offset = _mesh_philox_key(fn, device_mesh)
    return _engine_factory(fn, fn, [_size(size)], {"seed": seed, "offset": offset}, dtype, layout, device_mesh,
                           placements, requires_grad)


def rand(*size, requires_grad=False, dtype=None, layout=torch.strided, device_mesh=None, placements=None):
    """torch.distributed.tensor.rand: U[0, 1) of global shape `size`, each block its slice of the
    one-device draw (dtensor's Philox op with the mesh's seed: replicas equal, any layout the same
    values; not torch's CPU generator's values)."""
    return _drawn("rand", size, dtype, layout, device_mesh, placements, requires_grad)


def randn(*size, requires_grad=False, dtype=None, layout=torch.strided, device_mesh=None, placements=None):
    """torch.distributed.tensor.randn: N(0, 1), as rand."""
    return _drawn("randn", size, dtype, layout, device_mesh, placements, requires_grad)


# ---- torch's other factories, with device_mesh and placements -----------------------------------


def _number(fn, name, v):
    """A Python number, or the value of a one-element tensor (torch accepts both for these bounds)."""
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise DTensorError(f"{fn}: {name} is a tensor of shape {tuple(v.shape)}; accepted: a number "
                               f"or a one-element tensor")
        return v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DTensorError(f"{fn}: {name} = {v!r}; accepted: a number")
    return v


def _by_torch(fn, make):
    """make(), a call of torch's own factory (on the meta device where only the global shape and
    dtype are wanted), with torch's argument errors raised as a DTensorError naming the factory."""
    try:
        return make()
    except (RuntimeError, TypeError, ValueError) as e:
        raise DTensorError(f"{fn}: {str(e).splitlines()[0]}") from None


def _block_range(spec, d):
    """The global indices along dim d of this rank's block (blocks are contiguous ranges)."""
    lo = spec.local_offset[d]
    return torch.arange(lo, lo + spec.local_shape[d], dtype=torch.int64)


def _block_of(whole, spec):
    """This rank's block of `whole` (the global tensor, which every rank computed) under `spec`."""
    return whole[tuple(slice(o, o + n) for o, n in zip(spec.local_offset, spec.local_shape))].clone()


def _no_device(fn, device):
    if device is not None and torch.device(device).type != "cpu":
        raise UnsupportedOpError(f"{fn}: device {device}; the bridge's blocks live on the CPU (accepted: "
                                 f"None or 'cpu')")


def arange(start, end=None, step=1, *, dtype=None, layout=torch.strided, device=None, requires_grad=False,
           device_mesh=None, placements=None):
    """torch.arange(start, end, step) laid out as `placements`: the registered op arange.start_step
    (ops/factory/): element i is start + i * step (in float64 for floating dtypes, int64 for integral
    ones, then cast: torch's CPU kernel's arithmetic), each rank computing only its block. dtype as
    torch infers it (int64 for int bounds, else the default floating dtype). Raises DTensorError for
    torch's argument errors (a zero step, a wrong-signed range) and for bad placements."""
    _no_device("arange", device)
    if end is None:
        start, end = 0, start
    start, end, step = (_number("arange", n, v) for n, v in (("start", start), ("end", end), ("step", step)))
    if dtype is None and any(isinstance(v, float) for v in (start, end, step)):
        dtype = torch.get_default_dtype()
    return _engine_factory("arange", "arange.start_step", [start, end, step], {}, dtype, layout, device_mesh,
                           placements, requires_grad)


def _spaced(fn, start, end, steps, base, dtype, layout, device, requires_grad, device_mesh, placements):
    """linspace (base None) and logspace: torch's CPU kernel's formula, per element index i of n:
    start + s * i in the first half and end - s * (n - 1 - i) in the second, s = (end - start) / (n - 1),
    computed in the output dtype (float64 for an integral output), logspace raising base to it."""
    _no_device(fn, device)
    start, end = _number(fn, "start", start), _number(fn, "end", end)
    if not isinstance(steps, int) or isinstance(steps, bool):
        raise DTensorError(f"{fn}: steps = {steps!r}; accepted: a non-negative int")
    m = _by_torch(fn, lambda: torch.linspace(start, end, steps, dtype=dtype, device="meta") if base is None else
              torch.logspace(start, end, steps, base, dtype=dtype, device="meta"))

    def block(spec, dt):
        i = _block_range(spec, 0)
        work = dt if dt.is_floating_point else torch.float64
        if steps == 1:
            v = torch.full(i.shape, start, dtype=work)
        else:
            s = torch.tensor((end - start) / (steps - 1), dtype=work)
            v = torch.where(i < steps // 2, start + s * i.to(work), end - s * (steps - 1 - i).to(work))
        if base is not None:
            v = torch.pow(torch.tensor(base, dtype=work), v)
        return v.to(dt)

    return _factory(fn, tuple(m.shape), None, m.dtype, layout, device_mesh, placements, requires_grad, block)


def linspace(start, end, steps, *, dtype=None, layout=torch.strided, device=None, requires_grad=False,
             device_mesh=None, placements=None):
    """torch.linspace(start, end, steps) laid out as `placements` (see _spaced for the arithmetic)."""
    return _spaced("linspace", start, end, steps, None, dtype, layout, device, requires_grad, device_mesh,
                   placements)


def logspace(start, end, steps, base=10.0, *, dtype=None, layout=torch.strided, device=None,
             requires_grad=False, device_mesh=None, placements=None):
    """torch.logspace(start, end, steps, base) laid out as `placements`: base ** linspace's values."""
    return _spaced("logspace", start, end, steps, _number("logspace", "base", base), dtype, layout, device,
                   requires_grad, device_mesh, placements)


def eye(n, m=None, *, dtype=None, layout=torch.strided, device=None, requires_grad=False, device_mesh=None,
        placements=None):
    """torch.eye(n, m) laid out as `placements`: 1 where the row equals the column, each rank
    comparing its block's global row and column indices."""
    _no_device("eye", device)
    t = _by_torch("eye", lambda: torch.eye(n, dtype=dtype, device="meta") if m is None else
                  torch.eye(n, m, dtype=dtype, device="meta"))

    def block(spec, dt):
        return (_block_range(spec, 0)[:, None] == _block_range(spec, 1)[None, :]).to(dt)

    return _factory("eye", tuple(t.shape), None, t.dtype, layout, device_mesh, placements,
                    requires_grad, block)


def scalar_tensor(s, *, dtype=None, layout=torch.strided, device=None, requires_grad=False, device_mesh=None,
                  placements=None):
    """torch.scalar_tensor(s): a 0-d tensor (the registered op scalar_tensor), Replicate on every
    mesh dim (it has no dim to shard)."""
    _no_device("scalar_tensor", device)
    value = _number("scalar_tensor", "s", s)
    return _engine_factory("scalar_tensor", "scalar_tensor", [value], {}, dtype or torch.get_default_dtype(), layout,
                           device_mesh, placements, requires_grad)


def empty_strided(size, stride, *, dtype=None, layout=torch.strided, device=None, requires_grad=False,
                  pin_memory=False, device_mesh=None, placements=None):
    """torch.empty_strided (the registered op empty_strided): zeros of global shape `size`. Each block
    is contiguous, as every bridge block is: `stride` is checked (one non-negative int per dim) but
    describes no block's memory; the DTensor reports contiguous strides."""
    _no_device("empty_strided", device)
    return _engine_factory("empty_strided", "empty_strided", [tuple(size), tuple(stride)], {},
                           dtype or torch.get_default_dtype(), layout, device_mesh, placements, requires_grad)


def empty_permuted(size, physical_layout, *, dtype=None, layout=torch.strided, device=None,
                   requires_grad=False, pin_memory=False, device_mesh=None, placements=None):
    """torch.empty_permuted: uninitialized, of global shape `size`; `physical_layout` must be a
    permutation of the dims and, as empty_strided's stride, describes no block (blocks are contiguous)."""
    _no_device("empty_permuted", device)
    size, order = tuple(size), tuple(physical_layout)
    if sorted(order) != list(range(len(size))):
        raise DTensorError(f"empty_permuted: physical_layout {order} for size {size}; accepted: a permutation "
                           f"of range({len(size)})")
    return empty(size, dtype=dtype, layout=layout, requires_grad=requires_grad, device_mesh=device_mesh,
                 placements=placements)


def randint(*args, generator=None, dtype=None, layout=torch.strided, device=None, requires_grad=False,
            device_mesh=None, placements=None):
    """torch.randint(high, size) or randint(low, high, size): integers uniform in [low, high) (int64
    unless `dtype`), each block its slice of the one-device draw (dtensor's Philox random_, as rand).
    A torch.Generator is refused: the mesh's seed decides the draw, alike on every rank."""
    _no_device("randint", device)
    if generator is not None:
        raise UnsupportedOpError("randint: a torch.Generator; the draw uses the mesh's agreed Philox seed "
                                 "(accepted: generator=None)")
    if len(args) == 2:
        low, (high, size) = 0, args
    elif len(args) == 3:
        low, high, size = args
    else:
        raise DTensorError(f"randint: {len(args)} positional arguments; accepted: (high, size) or "
                           f"(low, high, size)")
    low, high = int(_number("randint", "low", low)), int(_number("randint", "high", high))
    if low >= high:
        raise DTensorError(f"randint: low {low} >= high {high}; accepted: low < high")
    z = _factory("randint", tuple(size), _filled(0), dtype or torch.int64, layout, device_mesh, placements, False)
    return z.random_(low, high).detach().requires_grad_(requires_grad)


def _triangle_indices(fn, row, col, offset, dtype, layout, device, device_mesh, placements):
    """tril_indices / triu_indices: the 2 x K index pairs as torch lists them. The pairs depend on
    every earlier row's count, so each rank computes all of them (O(K), the size of the result) and
    keeps its block."""
    _no_device(fn, device)
    whole = _by_torch(fn, lambda: getattr(torch, fn)(row, col, offset, dtype=dtype or torch.int64))

    return _factory(fn, tuple(whole.shape), None, whole.dtype, layout, device_mesh, placements, False,
                    lambda spec, dt: _block_of(whole, spec))


def tril_indices(row, col, offset=0, *, dtype=None, layout=torch.strided, device=None, device_mesh=None,
                 placements=None):
    """torch.tril_indices(row, col, offset) laid out as `placements` (see _triangle_indices)."""
    return _triangle_indices("tril_indices", row, col, offset, dtype, layout, device, device_mesh, placements)


def triu_indices(row, col, offset=0, *, dtype=None, layout=torch.strided, device=None, device_mesh=None,
                 placements=None):
    """torch.triu_indices(row, col, offset) laid out as `placements` (see _triangle_indices)."""
    return _triangle_indices("triu_indices", row, col, offset, dtype, layout, device, device_mesh, placements)


def randperm(n, *, generator=None, dtype=torch.int64, layout=torch.strided, device=None, requires_grad=False,
             device_mesh=None, placements=None):
    """torch.randperm(n): a random permutation of 0..n-1 laid out as `placements` (the registered op
    randperm, ops/factory/). The one-device permutation is the stable argsort of n float64 Philox keys
    (the mesh's seed and offset, as dtensor.rand); each rank sorts them all (O(n log n)) and keeps its
    block, so every layout holds the same permutation. A torch.Generator is refused (the mesh's seed
    decides, as randint)."""
    _no_device("randperm", device)
    if generator is not None:
        raise UnsupportedOpError("randperm: a torch.Generator; the draw uses the mesh's agreed Philox seed "
                                 "(accepted: generator=None)")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise DTensorError(f"randperm: n = {n!r}; accepted: a non-negative int")
    seed, offset = _mesh_philox_key("randperm", device_mesh)
    return _engine_factory("randperm", "randperm", [n], {"seed": seed, "offset": offset}, dtype, layout, device_mesh,
                           placements, requires_grad)
