"""Interop with torch.distributed.tensor: a torch DTensor as a dtensor DTensor and back, sharing the
local shard (DLPack, no copy).

Both sides must describe the same ranks: a torch DeviceMesh on "cpu" whose rank layout is row-major
0..n-1 over the whole job (as init_device_mesh makes it), and dtensor's process group started in the
same job (torchrun or `dtensor launch`), so that rank r of one is rank r of the other. Shards follow
torch.chunk on both sides, uneven ones included. Every call is collective the first time it meets a
torch mesh (dtensor's init_device_mesh runs on every rank).
"""
from . import _native_from_local
from ._dtensor import DTensor, DTensorError, Partial, Replicate, Shard, init_device_mesh

_REDUCE_OPS = ("sum", "avg", "max", "min")  # the Partial reductions both libraries have
_meshes = {}  # torch DeviceMesh -> dtensor DeviceMesh, made once per torch mesh (init is collective)


def _torch():
    import torch
    import torch.distributed.tensor as tdt

    return torch, tdt


def _check_layout(fn, torch_mesh):
    """The torch mesh must number the job's ranks row-major, as dtensor's meshes do."""
    torch, _ = _torch()
    if torch_mesh.device_type != "cpu":
        raise DTensorError(f"{fn}: torch mesh {torch_mesh} is on '{torch_mesh.device_type}'; accepted: a \"cpu\" mesh")
    ranks = torch_mesh.mesh
    n = ranks.numel()
    world = torch.distributed.get_world_size()
    if n != world or not torch.equal(ranks.flatten().cpu(), torch.arange(n)):
        raise DTensorError(f"{fn}: torch mesh {torch_mesh} has rank layout {ranks.tolist()}; accepted: ranks "
                           f"0..{world - 1} of the whole job in row-major order (dtensor's mesh layout)")


def _check_same_ranks(fn, torch_mesh, mesh):
    t_coord, d_coord = torch_mesh.get_coordinate(), mesh.get_coordinate()
    if torch_mesh.get_rank() != mesh.get_rank() or list(t_coord or []) != list(d_coord):
        raise DTensorError(f"{fn}: this process is rank {torch_mesh.get_rank()} at {t_coord} of torch mesh "
                           f"{torch_mesh} but rank {mesh.get_rank()} at {d_coord} of dtensor's {mesh}; both "
                           f"process groups must come from the same launcher's RANK")


def dtensor_mesh(torch_mesh):
    """The dtensor DeviceMesh of torch_mesh's shape and dim names (made on first use: collective)."""
    mesh = _meshes.get(torch_mesh)
    if mesh is None:
        _check_layout("from_torch", torch_mesh)
        mesh = init_device_mesh("cpu", tuple(torch_mesh.shape), mesh_dim_names=torch_mesh.mesh_dim_names)
        _check_same_ranks("from_torch", torch_mesh, mesh)
        _meshes[torch_mesh] = mesh
    return mesh


def _from_torch_placement(p, tdt):
    if type(p) is tdt.Shard:  # not its subclasses (_StridedShard): their layouts differ
        return Shard(p.dim)
    if type(p) is tdt.Replicate:
        return Replicate()
    if type(p) is tdt.Partial and p.reduce_op in _REDUCE_OPS:
        return Partial(p.reduce_op)
    raise DTensorError(f"from_torch: placement {p!r} has no dtensor counterpart; accepted: Shard(d), Replicate(), "
                       f"Partial(reduce_op) with reduce_op in {', '.join(_REDUCE_OPS)}")


def _to_torch_placement(p, tdt):
    if p.weights is not None:
        raise DTensorError(f"to_torch: placement {p!r} is a weighted shard, which torch.distributed.tensor "
                           f"has no counterpart for; redistribute to an even Shard({p.dim}) first")
    if p.is_shard():
        return tdt.Shard(p.dim)
    if p.is_replicate():
        return tdt.Replicate()
    return tdt.Partial(p.reduce_op)


def from_torch(t):
    """A torch.distributed.tensor.DTensor as a dtensor DTensor: same global shape, placements and mesh
    shape and dim names; the local shard is shared, not copied. Collective on the first call per mesh."""
    torch, tdt = _torch()
    if not isinstance(t, tdt.DTensor):
        raise DTensorError(f"from_torch: got a {type(t).__module__}.{type(t).__qualname__}; accepted: a "
                           f"torch.distributed.tensor.DTensor")
    placements = [_from_torch_placement(p, tdt) for p in t.placements]
    mesh = dtensor_mesh(t.device_mesh)
    with torch.no_grad():  # to_local() is then the shard itself, not an autograd view of it
        local = t.to_local().detach()  # DLPack exports no tensor that requires grad
    try:
        return _native_from_local(local, mesh, placements, list(t.shape))
    except DTensorError as e:
        raise DTensorError(f"from_torch: torch DTensor of shape {list(t.shape)} placements {list(t.placements)} "
                           f"with local shard {list(local.shape)}: {e}") from None


def _contiguous_strides(shape):
    strides, acc = [], 1
    for n in reversed(shape):
        strides.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(strides))


def to_torch(x, torch_mesh):
    """A dtensor DTensor as a torch.distributed.tensor.DTensor on torch_mesh (the same shape, rank
    layout and dim names as x's mesh): same global shape and placements, the local shard shared."""
    torch, tdt = _torch()
    if not isinstance(x, DTensor):
        raise DTensorError(f"to_torch: got a {type(x).__module__}.{type(x).__qualname__}; accepted: a dtensor.DTensor")
    mesh = x.device_mesh
    t_names = list(torch_mesh.mesh_dim_names or [])
    if tuple(torch_mesh.shape) != mesh.shape or (t_names and mesh.mesh_dim_names and t_names != mesh.mesh_dim_names):
        raise DTensorError(f"to_torch: torch mesh {torch_mesh} (shape {tuple(torch_mesh.shape)}, dims {t_names}) "
                           f"does not match the DTensor's {mesh}; accepted: a torch mesh of the same shape and names")
    _check_layout("to_torch", torch_mesh)
    _check_same_ranks("to_torch", torch_mesh, mesh)
    placements = [_to_torch_placement(p, tdt) for p in x.placements]
    local = x._torch_local()
    _check_torch_local_shape(local, x.shape, torch_mesh, placements)
    return tdt.DTensor.from_local(local, torch_mesh, placements, run_check=False, shape=torch.Size(x.shape),
                                  stride=_contiguous_strides(x.shape))


def _check_torch_local_shape(local, shape, torch_mesh, placements):
    """torch's chunking of the global shape must give dtensor's local shape (torch.chunk on both sides)."""
    try:
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset
    except ImportError:  # a private helper of torch: without it, the check is left out
        return
    want, _ = compute_local_shape_and_global_offset(shape, torch_mesh, placements)
    if tuple(want) != tuple(local.shape):
        raise DTensorError(f"to_torch: dtensor's local shard {list(local.shape)} of global {list(shape)} with "
                           f"placements {placements} differs from torch's {list(want)}")
