# The whole of PyTorch's op_db through DTensors: every OpInfo entry's samples, forward and backward,
# run by torch on one device (the reference) and on DTensors laid out over a mesh with seeded random
# placements, the op called as a PyTorch user calls it (entry.op on DTensor arguments, torch autograd
# for the gradients). One module for both engines: dtensor's bridge (`BridgeEngine`, thread ranks of
# this process) and PyTorch DTensor (`TorchEngine`, Gloo process ranks, bench/opdb_vs_torch_dtensor.py),
# so both see the same samples, placements and Partial pieces.
#
# An entry with no tensor argument (a factory: arange, ones, ...) is called through the engine's
# factory of the same name (FACTORIES) with the mesh and a seeded output layout added.
#
# Placements per tensor argument and mesh dim: Replicate, Shard(d) (uneven chunks included, the same
# tensor dim may be sharded on both mesh dims) or, for floating and int64 tensors, Partial sum / avg /
# max / min with random pieces: for sum, pieces of both signs that add up to the value; for avg,
# pieces whose mean is the value; for max (min), the value on one random rank per element and lower
# (higher) values elsewhere. A floating tensor given a Partial placement is first rounded to a grid
# (2^-20 for float64, 2^-10 for float32) on which the pieces and their sums are exact in any order,
# and the reference runs on those rounded values too, so a rule that wrongly passes Partial through
# a nonlinear op shows as a mismatch and a correct one cannot show rounding noise.
import contextlib
import dataclasses
import itertools
import math
import random

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

MAX_SAMPLES = 3  # per entry: the first samples of sample_inputs (they cover the common call forms)
FLOAT_RTOL, FLOAT_ATOL = 1e-7, 1e-9  # float64; float32 gets 1e-4 / 1e-5
GRID = {torch.float64: 2.0 ** -20, torch.float32: 2.0 ** -10}
GRID_LIMIT = {torch.float64: 2.0 ** 30, torch.float32: 2.0 ** 12}  # |x| below it: exact on the grid


def entries():
    from torch.testing._internal.common_methods_invocations import op_db

    import opinfo_seeding
    opinfo_seeding.seed_host_generators_only()
    return list(op_db)


def entry_name(entry):
    """The entry's name with its variant (`nn.functional.interpolate.bilinear`)."""
    return entry.name + ("." + entry.variant_test_name if entry.variant_test_name else "")


def pick_dtype(entry):
    """float64 where the entry's CPU kernels take it (exact enough to compare tightly), else
    float32, int64, bool, complex128 or complex64 (view_as_real's only); None when none of them."""
    ds = entry.supported_dtypes("cpu")
    for d in (torch.float64, torch.float32, torch.int64, torch.bool, torch.complex128, torch.complex64):
        if d in ds:
            return d
    return None


@dataclasses.dataclass
class Layout:
    """One tensor argument's placements, as ("R",), ("S", dim) or ("P", op) per mesh dim, and the
    seed of its Partial pieces."""
    placements: list
    seed: int


def choose_layout(t, rng, mesh_ndim):
    kinds = [("R",)] + [("S", d) for d in range(t.dim()) if t.shape[d] >= 1]
    finite = t.is_floating_point() and t.numel() > 0 and bool(torch.isfinite(t).all()) and \
        float(t.abs().max()) < GRID_LIMIT.get(t.dtype, 0)
    if finite:
        kinds += [("P", "sum"), ("P", "avg"), ("P", "max"), ("P", "min")]
    elif t.dtype == torch.int64 and t.numel() > 0 and int(t.abs().max()) < 2 ** 40:
        kinds += [("P", "sum"), ("P", "max"), ("P", "min")]
    placements = []
    for _ in range(mesh_ndim):
        p = rng.choice(kinds)
        if p[0] == "P":  # one reduce op per tensor (DESIGN §2; PyTorch DTensor's order would be ambiguous)
            p = next((q for q in placements if q[0] == "P"), p)
        placements.append(p)
    return Layout(placements, rng.randrange(2 ** 31))


# Entries with no tensor argument that are compared through the engine's factory of the same name
# (BridgeEngine: dtensor's factories; TorchEngine: torch.distributed.tensor's, which has the first
# six), called with the sample's arguments (less `device`) plus the mesh and a seeded output layout.
FACTORIES = ("ones", "zeros", "empty", "full", "rand", "randn", "arange", "linspace", "logspace", "eye",
             "scalar_tensor", "empty_strided", "empty_permuted", "randint", "tril_indices", "triu_indices")


# Tensor arguments torch reads on the host before dispatch, given as plain tensors (as a user gives
# them): entry -> positions in the flattened (input, *args) of the sample. tensor_split's
# tensor_indices_or_sections must be a CPU int64 tensor and ATen's CompositeImplicit kernel reads its
# data pointer before any op reaches dispatch, which no wrapper subclass (the bridge's or PyTorch
# DTensor's) has (tests/python/test_bridge_tensor_split.py).
HOST_TENSORS = {"tensor_split": (1,)}


def output_layout(t, rng, mesh_ndim):
    """A factory output's layout: Replicate or Shard(d) per mesh dim (a factory makes no Partial)."""
    kinds = [("R",)] + [("S", d) for d in range(t.dim()) if t.shape[d] >= 1]
    return Layout([rng.choice(kinds) for _ in range(mesh_ndim)], 0)


def round_for_partial(t, layout):
    if any(p[0] == "P" for p in layout.placements) and t.is_floating_point():
        g = GRID[t.dtype]
        return torch.round(t / g) * g
    return t


def _pieces(v, op, n, gen):
    """n pieces that reduce to v with op, exact on the grid."""
    def noise():
        if v.is_floating_point():
            g = GRID[v.dtype]
            return torch.round((torch.rand(v.shape, generator=gen, dtype=torch.float64) * 8 - 4) / g).to(v.dtype) * g
        return torch.randint(-50, 50, v.shape, generator=gen, dtype=v.dtype)

    r = [noise() for _ in range(n - 1)]
    if op == "sum":
        return r + [v - sum(r, torch.zeros_like(v))]
    if op == "avg":
        return [v + x for x in r] + [v - sum(r, torch.zeros_like(v))]
    step = GRID[v.dtype] if v.is_floating_point() else 1
    holder = torch.randint(0, n, v.shape, generator=gen)  # the rank that holds v, per element
    return [torch.where(holder == k, v, v - (noise().abs() + step) if op == "max" else v + (noise().abs() + step))
            for k in range(n)]


def local_block(t, layout, mesh_shape, coord):
    """This mesh coordinate's block of t under the layout: the Partial pieces (mesh dims in order),
    then torch.chunk along each sharded dim (mesh dims in order), as DTensor lays it out. A copy:
    the rank threads must not share memory (a replicated block that an op updates in place, as
    batch_norm's running statistics, was read and written by 4 ranks at once: a flaky mismatch)."""
    gen = torch.Generator().manual_seed(layout.seed)
    v = t
    for i, p in enumerate(layout.placements):
        if p[0] == "P":
            v = _pieces(v, p[1], mesh_shape[i], gen)[coord[i]]
    for i, p in enumerate(layout.placements):
        if p[0] == "S":
            chunks = torch.chunk(v, mesh_shape[i], p[1])
            v = chunks[coord[i]] if coord[i] < len(chunks) else v.narrow(p[1], v.shape[p[1]], 0)
    return v.contiguous().clone()


@dataclasses.dataclass
class Case:
    """One sample ready for both sides: the flat argument list (tensors rounded as placed), the
    pytree spec of (args, kwargs), each tensor's layout, and the reference results."""
    entry: str
    index: int
    dtype: torch.dtype
    flat: list
    spec: object
    layouts: dict            # flat index -> Layout
    grad_inputs: list        # flat indices of the floating tensors gradients are taken for
    out: object = None       # reference outputs (flat list of tensors / values)
    grads: object = None     # reference gradients, by grad_inputs; None: no backward compared
    weights: object = None   # one weight tensor per floating output, for the backward's loss
    skip: str = ""           # why this sample is not compared
    random: bool = False     # draws random numbers: compared with the engine's own one-device draw
    aten_forward: frozenset = frozenset()   # ATen op packets torch dispatched for the reference's forward
    aten_backward: frozenset = frozenset()  # ... and for its gradients (that forward and the backward)
    mutated: list = dataclasses.field(default_factory=list)  # flat indices of inputs the op writes
    factory: object = None   # a factory entry: its output's Layout (the op is the engine's factory)


def _flat_outputs(out):
    leaves, _ = tree_flatten(out)
    return leaves


def _loss(outs, weights):
    total = None
    for o, w in zip(outs, weights):
        if w is None:
            continue
        # A complex output: the loss over its real pairs (real, so that it has a gradient).
        # (resolve_conj: view_as_real refuses ifft's conjugate views)
        term = (torch.view_as_real(o.resolve_conj()) * torch.view_as_real(w)).sum() if o.is_complex() else (o * w).sum()
        total = term if total is None else total + term
    return total


def make_cases(entry, mesh_ndim=2, seed=0):
    """The compared samples of one entry; a Case with `skip` set says why one is not compared."""
    dtype = pick_dtype(entry)
    if dtype is None:
        return [Case(entry.name, 0, None, [], None, {}, [], skip="no float64/float32/int64/bool/complex CPU kernel")]
    torch.manual_seed(seed)
    try:
        # The first samples only: the iterator reseeds before each, so the later ones, never made,
        # cannot change them.
        samples = list(itertools.islice(entry.sample_inputs("cpu", dtype, requires_grad=False), MAX_SAMPLES))
    except Exception as e:  # noqa: BLE001 - torch's own sample generator
        return [Case(entry.name, 0, dtype, [], None, {}, [], skip=f"sample_inputs raised {type(e).__name__}")]
    cases = []
    rng = random.Random(f"{entry.name}/{entry.variant_test_name}/{seed}")
    for k, s in enumerate(samples):
        flat, spec = tree_flatten(((s.input, *s.args), dict(s.kwargs)))
        case = Case(entry.name, k, dtype, flat, spec, {}, [])
        cases.append(case)
        tensors = [i for i, v in enumerate(flat) if isinstance(v, torch.Tensor)
                   and i not in HOST_TENSORS.get(entry.name, ())]
        if not tensors and entry.name not in FACTORIES:
            case.skip = "no tensor argument"
            continue
        if any(flat[i].layout != torch.strided for i in tensors):
            case.skip = "sparse layout"
            continue
        for i in tensors:
            lay = choose_layout(flat[i], rng, mesh_ndim)
            case.layouts[i] = lay
            flat[i] = round_for_partial(flat[i].detach().clone(), lay)
        given = [v.clone() if isinstance(v, torch.Tensor) else v for v in flat]
        (args, kwargs) = tree_unflatten(given, spec)
        try:
            torch.manual_seed(1)
            out = entry.op(*args, **kwargs)
        except Exception as e:  # noqa: BLE001
            case.skip = f"torch raised {type(e).__name__}"
            continue
        outs = _flat_outputs(out)
        # Inputs the op writes (batch norm's running statistics, in-place ops): their values after
        # the op are compared as outputs too, and no gradient is taken for them.
        case.mutated = [i for i in tensors if not _same(given[i], flat[i])]
        outs += [given[i] for i in case.mutated]
        if any(o.layout != torch.strided for o in outs if isinstance(o, torch.Tensor)):
            case.skip = "sparse layout"
            continue
        try:
            random_op, case.aten_forward = _dispatched(entry, flat, spec)
        except Exception as e:  # noqa: BLE001
            case.skip = f"torch raised {type(e).__name__} on a second call"
            continue
        case.random = random_op
        case.out = [o.detach().clone() if isinstance(o, torch.Tensor) else o for o in outs]
        if not tensors:  # a factory: its output's layout is the one chosen
            if len(outs) != 1 or not isinstance(outs[0], torch.Tensor):
                case.skip = "a factory with other than one tensor output"
                continue
            case.factory = output_layout(outs[0], rng, mesh_ndim)
        if entry.supports_autograd and (dtype.is_floating_point or dtype.is_complex):
            case.grad_inputs = [i for i in tensors if (flat[i].is_floating_point() or flat[i].is_complex())
                                and i not in case.mutated]
            wgen = torch.Generator().manual_seed(k + 7)
            case.weights = [torch.rand(o.shape, generator=wgen, dtype=o.dtype) * 4 - 2
                            if isinstance(o, torch.Tensor) and (o.is_floating_point() or o.is_complex()) else None
                            for o in outs[:len(outs) - len(case.mutated)]]
            case.grads = _reference_grads(entry, case)
            if case.grads is None and len(case.grad_inputs) > 1:
                # torch refuses a gradient for some argument (soft_margin_loss's target): the first
                # floating input's alone
                case.grad_inputs = case.grad_inputs[:1]
                case.grads = _reference_grads(entry, case)
    return cases


class _Recorder:
    """A TorchDispatchMode recording the ATen op packets dispatched (by name, "aten.mm") and whether
    one is tagged nondeterministic_seeded. The bridge receives the same ops for the same call on
    DTensors (both sit below autograd and the CompositeImplicit decompositions)."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        recorder = self

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                recorder.ops.add(func._schema.name.replace("::", "."))
                if torch.Tag.nondeterministic_seeded in func.tags:
                    recorder.random = True
                return func(*args, **(kwargs or {}))

        self.ops, self.random, self.mode = set(), False, Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


def _dispatched(entry, flat, spec):
    """(whether the op draws random numbers, the ATen op packets its forward dispatches). A random
    op (an ATen op tagged nondeterministic_seeded runs) has values from torch's mt19937 stream, not
    comparable with a DTensor engine's (dtensor draws Philox), so such a case is compared with the
    engine's own one-device draw (_random_reference). OpInfo's random entries also reseed torch's
    generator (wrapper_set_seed), which run_entry disables around every engine run."""
    args, kwargs = tree_unflatten([v.clone() if isinstance(v, torch.Tensor) else v for v in flat], spec)
    with _Recorder() as seen:
        entry.op(*args, **kwargs)
    return seen.random, frozenset(seen.ops)


def _same(a, b):
    return a.shape == b.shape and bool(((a == b) | (a.isnan() & b.isnan()) if a.is_floating_point() else a == b).all())


def _reference_grads(entry, case):
    flat = [v.detach().clone().requires_grad_() if i in case.grad_inputs else
            v.clone() if isinstance(v, torch.Tensor) else v for i, v in enumerate(case.flat)]
    args, kwargs = tree_unflatten(flat, case.spec)
    try:
        with _Recorder() as seen:  # the forward with gradients on (it may dispatch other ops) and the backward
            outs = _flat_outputs(entry.op(*args, **kwargs))
            loss = _loss(outs, case.weights)
            if loss is None or not loss.requires_grad:
                return None
            grads = torch.autograd.grad(loss, [flat[i] for i in case.grad_inputs], allow_unused=True)
    except Exception:  # noqa: BLE001 - torch does not differentiate this sample
        return None
    case.aten_backward = frozenset(seen.ops)
    return [None if g is None else g.detach() for g in grads]


# Entries whose outputs are uninitialized memory: shapes and dtypes compared, not values.
UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided", "new_empty", "new_empty_strided"}


_TOLERANCES = {torch.float64: (FLOAT_RTOL, FLOAT_ATOL), torch.complex128: (FLOAT_RTOL, FLOAT_ATOL),
               torch.float16: (1e-3, 1e-5), torch.bfloat16: (8e-3, 1e-5)}  # else float32's (1e-4, 1e-5)


def piece_dtypes(case):
    """The floating dtypes of the case's inputs split into Partial(sum/avg) pieces: the pieces add up
    to the input only within that dtype's rounding (cov's float32 aweights under a float64 result)."""
    return {case.flat[i].dtype for i, lay in case.layouts.items()
            if case.flat[i].is_floating_point() and any(p[0] == "P" and p[1] in ("sum", "avg") for p in lay.placements)}


def close(got, want, values=True, pieces=()):
    """None when got equals want (values, shape, dtype; NaN positions), else what differs; the
    tolerance is want's dtype's, or the coarsest of `pieces` (piece_dtypes) where coarser."""
    if not isinstance(want, torch.Tensor):
        if isinstance(got, torch.Tensor) and got.dim() == 0:
            got = got.item()
        return None if got == want or (got != got and want != want) else f"{got!r} != {want!r}"
    if not isinstance(got, torch.Tensor):
        return f"got {type(got).__name__}, want a tensor"
    if got.shape != want.shape:
        return f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if not values:
        return None
    # a few units of the dtype's rounding
    rtol, atol = max(_TOLERANCES.get(d, (1e-4, 1e-5)) for d in {want.dtype, *pieces})
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        return str(e).splitlines()[-1][:200] if str(e) else "values differ"
    return None


def placed_arguments(case, mesh_shape, coord, make):
    """The case's flat arguments at this mesh coordinate: each tensor as make(block, layout, whole
    tensor), a DTensor, made a leaf requiring grad where gradients are compared."""
    flat = list(case.flat)
    for i, lay in case.layouts.items():
        flat[i] = make(local_block(case.flat[i], lay, mesh_shape, coord), lay, case.flat[i])
        if case.grads is not None and i in case.grad_inputs:
            flat[i] = flat[i].detach().requires_grad_()
    return flat


def _weight_placements(out, dtensor):
    """The output's placements with Partial made Replicate (of dtensor's or PyTorch DTensor's);
    None (replicated) for an output that is not a DTensor."""
    if not hasattr(out, "placements"):
        return None
    if dtensor is None:
        from torch.distributed.tensor import Replicate
    else:
        Replicate = dtensor.Replicate
    return [p if p.is_shard() else Replicate() for p in out.placements]


@contextlib.contextmanager
def _own_generator(seed):
    """Thread ranks share torch's one CPU generator, where each process of an SPMD program has its
    own, seeded alike: a random draw torch makes with no tensor argument (F.fractional_max_pool2d's
    torch.rand of its random samples) comes, in this thread, from a generator of its own seeded
    `seed`, so every rank (and the one-device run) draws the same numbers, as processes would."""
    from torch.utils._python_dispatch import TorchDispatchMode

    gen = torch.Generator().manual_seed(seed)
    with_generator = {"default": "generator", "low": "low_generator"}  # aten.rand -> aten.rand.generator

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if torch.Tag.nondeterministic_seeded in func.tags and kwargs.get("generator") is None and not any(
                    isinstance(v, torch.Tensor) for v in tree_flatten((args, kwargs))[0]):
                overload = getattr(func.overloadpacket, with_generator.get(func._overloadname, ""), None)
                if overload is not None:
                    return overload(*args, **kwargs, generator=gen)
            return func(*args, **kwargs)

    with Mode():
        yield


class BridgeEngine:
    """dtensor's bridge on a mesh of thread ranks of this process."""
    name = "dtensor"

    def __init__(self, mesh_shape=(2, 2)):
        import dtensor
        from dtensor import bridge
        self.dtensor, self.bridge, self.mesh_shape = dtensor, bridge, tuple(mesh_shape)

    def placement(self, p):
        d = self.dtensor
        return d.Replicate() if p[0] == "R" else d.Shard(p[1]) if p[0] == "S" else d.Partial(p[1])

    def _on_mesh(self, entry, case, mesh_shape, how):
        def fn(world):
            mesh = self.dtensor.init_device_mesh("cpu", mesh_shape)
            try:  # a dtype the engine has no tensors of (complex32, uint16): refused when the argument is made
                flat = placed_arguments(case, mesh_shape, mesh.get_coordinate(), lambda block, lay, t: (
                    self.bridge.from_local(block, mesh, [self.placement(p) for p in lay.placements], shape=t.shape)))
            except self.dtensor.DTensorError as e:
                return f"error: {type(e).__name__}: {str(e).splitlines()[0][:200]}", None
            op = entry.op if case.factory is None else factory_call(
                getattr(self.dtensor, entry.name), mesh, [self.placement(p) for p in case.factory.placements])
            with _own_generator(1) if case.random else contextlib.nullcontext():
                return how(entry, case, flat, lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t,
                           lambda w, o: self.bridge.distribute(w, mesh, _weight_placements(o, self.dtensor)), op)

        return self.dtensor.run_threads(math.prod(mesh_shape), fn)[0]

    def run(self, entry, case):
        """(forward problem or None, backward problem or None; "error: ..." when the DTensor run raised)."""
        return self._on_mesh(entry, case, self.mesh_shape, compare_on_rank)

    def results(self, entry, case, mesh_shape):
        """results_on_rank's (outputs, gradients) of rank 0 on a mesh of this shape."""
        return self._on_mesh(entry, case, mesh_shape, results_on_rank)


class TorchEngine:
    """PyTorch DTensor (torch.distributed.tensor) on this process's rank of a Gloo job of
    prod(mesh_shape) processes (bench/opdb_vs_torch_dtensor.py starts them; every rank makes the
    same cases, which are seeded)."""
    name = "PyTorch DTensor"

    def __init__(self, mesh_shape=(2, 2)):
        from torch.distributed.device_mesh import init_device_mesh
        self.mesh_shape = tuple(mesh_shape)
        self.mesh = init_device_mesh("cpu", self.mesh_shape)

    def placement(self, p):
        from torch.distributed.tensor import Partial, Replicate, Shard
        return Replicate() if p[0] == "R" else Shard(p[1]) if p[0] == "S" else Partial(p[1])

    def run(self, entry, case):
        from torch.distributed.tensor import DTensor, Replicate, distribute_tensor
        flat = placed_arguments(case, self.mesh_shape, self.mesh.get_coordinate(), lambda block, lay, t: (
            DTensor.from_local(block, self.mesh, [self.placement(p) for p in lay.placements], run_check=False,
                               shape=t.shape, stride=t.stride())))
        import torch.distributed.tensor as tdt
        op = entry.op
        if case.factory is not None:
            if entry.name not in ("ones", "zeros", "empty", "full", "rand", "randn"):
                return f"error: UnsupportedOpError: torch.distributed.tensor has no factory {entry.name}", None
            op = factory_call(getattr(tdt, entry.name), self.mesh, [self.placement(p) for p in case.factory.placements])
        return compare_on_rank(entry, case, flat, lambda t: t.full_tensor() if isinstance(t, DTensor) else t,
                               lambda w, o: distribute_tensor(w, self.mesh, _weight_placements(o, None)), op)


def factory_call(factory, mesh, placements):
    """The sample's call of a factory entry, made to `factory` with the mesh and placements added
    and `device` dropped (a DTensor factory's blocks are on the mesh's device)."""
    def call(*args, **kwargs):
        kwargs = {k: v for k, v in kwargs.items() if k != "device"}
        return factory(*args, **kwargs, device_mesh=mesh, placements=placements)
    return call


def results_on_rank(entry, case, flat, full, distribute_weight, op):
    """The op on this rank's DTensor arguments: (whole outputs, whole gradients or None), or
    (error text, None) for the forward, (outputs, error text) for the backward."""
    args, kwargs = tree_unflatten(flat, case.spec)
    try:
        outs = _flat_outputs(op(*args, **kwargs))
        got = [full(o) for o in outs] + [full(flat[i]) for i in case.mutated]
    except Exception as e:  # noqa: BLE001
        return f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}", None
    if case.grads is None:
        return got, None
    try:
        # Each weight laid out as its output (Shards kept, Partial as Replicate), so the gradients
        # that reach the op's backward are laid out as its outputs, not replicated.
        weights = [None if w is None else distribute_weight(w, o) for w, o in zip(case.weights, outs)]
        loss = _loss(outs, weights)
        leaves = [flat[i] for i in case.grad_inputs]
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
        return got, [None if g is None else full(g) for g in grads]
    except Exception as e:  # noqa: BLE001
        return got, f"error: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"


def compare_on_rank(entry, case, flat, full, distribute_weight, op):
    """Run the op on this rank's DTensor arguments; compare outputs (and gradients) with the case's."""
    got, grads = results_on_rank(entry, case, flat, full, distribute_weight, op)
    if isinstance(got, str):
        return got, None
    if len(got) != len(case.out):
        return f"{len(got)} outputs, the reference gives {len(case.out)}", None
    values = entry.name not in UNINITIALIZED
    pieces = piece_dtypes(case)
    fwd = next((f"output {j}: {p}" for j, (g, w) in enumerate(zip(got, case.out)) if (p := close(g, w, values, pieces))),
               None)
    if case.grads is None or fwd is not None:
        return fwd, None
    if isinstance(grads, str):
        return None, grads
    for j, (g, w) in enumerate(zip(grads, case.grads)):
        if w is None and g is None:
            continue
        if w is None:
            w = torch.zeros_like(g)
        if g is None:
            g = torch.zeros_like(w)
        if (p := close(g, w, pieces=pieces)):
            return None, f"grad {j}: {p}"
    return None, None


@contextlib.contextmanager
def _reseeding_disabled():
    """OpInfo's random entries reseed torch's generator in their op (wrapper_set_seed); in rank
    threads that deadlocks (torch's generator lock and the GIL), and the engine agrees on its seed
    at its first draw, so both runs of a random case keep the seed they start with. wrapper_set_seed
    also saves and restores the generator's state around the op (torch.get_rng_state, which takes
    the generator's lock holding the GIL): in rank threads that deadlocked too (a CI run,
    2026-11-30), so the entries' ops are called directly."""
    from torch.testing._internal import common_methods_invocations as cmi
    seed, wrapper = torch.manual_seed, cmi.wrapper_set_seed
    torch.manual_seed = lambda s: torch.default_generator
    cmi.wrapper_set_seed = lambda op, *args, **kwargs: op(*args, **kwargs)
    try:
        yield
    finally:
        torch.manual_seed, cmi.wrapper_set_seed = seed, wrapper


def _random_reference(engine, entry, case):
    """A random case's reference: the engine's own run on one device (every tensor Replicate on a
    1-rank mesh), which a sharded run must equal element for element (DTensor's random semantics:
    each block is its slice of the one-device draw with the same seed). Returns the forward's error
    text or None, and the backward's (its gradients are then not compared)."""
    one = dataclasses.replace(case, layouts={i: Layout([("R",)], lay.seed) for i, lay in case.layouts.items()},
                              grads=[] if case.grads is not None else None,
                              factory=case.factory and Layout([("R",)], 0))
    got, grads = engine.results(entry, one, (1,))
    if isinstance(got, str):
        return got, None
    case.out, case.grads = got, None if isinstance(grads, str) else grads
    return None, grads if isinstance(grads, str) else None


def run_entry(engine, entry, mesh_ndim=2):
    """[(case, forward status, backward status, detail)] for one entry; status: pass / mismatch /
    error / not compared."""
    rows = []
    for case in make_cases(entry, mesh_ndim):
        if case.skip:
            rows.append((case, "not compared", "not compared", case.skip))
            continue
        if case.random:
            if not hasattr(engine, "results") or math.prod(engine.mesh_shape) == 1:
                why = "random: no one-device draw of this engine" if not hasattr(engine, "results") else \
                    "random: a 1-rank run is its own reference"
                rows.append((case, "not compared", "not compared", why))
                continue
            with _reseeding_disabled():
                fwd, bwd = _random_reference(engine, entry, case)
                if fwd:
                    rows.append((case, "error", "error", f"{fwd} (one-device draw)"))
                    continue
                if bwd:
                    bwd += " (one-device draw)"
                fwd, bwd = engine.run(entry, case) if not bwd else (engine.run(entry, case)[0], bwd)
        else:
            with _reseeding_disabled():
                fwd, bwd = engine.run(entry, case)
        fs = "pass" if fwd is None else ("error" if fwd.startswith("error") else "mismatch")
        if case.grads is None and not bwd:
            bs = "not compared"
        elif fwd is not None:
            bs = fs
        else:
            bs = "pass" if bwd is None else ("error" if bwd.startswith("error") else "mismatch")
        rows.append((case, fs, bs, fwd or bwd or ("random: equals the one-device draw" if case.random else "")))
    return rows


def entry_status(rows, which):
    """An entry passes when at least one sample was compared and none failed."""
    col = 1 if which == "forward" else 2
    st = [r[col] for r in rows]
    if any(s in ("error", "mismatch") for s in st):
        return "error" if all(s != "mismatch" for s in st) else "mismatch"
    return "pass" if "pass" in st else "not compared"
