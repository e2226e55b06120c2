"""dtensor.bridge.fully_shard: FSDP-style parameter sharding over a data-parallel mesh dim.

    model = bridge.parallelize_module(model, mesh, tp_plan)        # mesh dims ("dp", "tp")
    for layer in model.model.layers:
        bridge.fully_shard(layer, mesh)                             # each layer's parameters Shard(0) on "dp"
    bridge.fully_shard(model, mesh)                                 # the rest (embeddings, norms, head)

As torch.distributed.fsdp.fully_shard (FSDP2) does with its DTensor parameters: every parameter the
call manages (those of `module` and its submodules not managed by an earlier call) is stored
Shard(0) on the data-parallel dim (its placements on the other dims, e.g. tensor parallel, kept),
so each rank holds 1/dp of it. Before `module`'s forward its parameters are all-gathered on that
dim (dtensor's differentiable redistribute) and used whole; after it the sharded parameters are
back in place. The gathered copies live on in autograd's graph until the backward, where the
redistribute's backward reduce-scatters each gradient into its sharded parameter (a Partial-over-dp
gradient, from batch-sharded data, is summed and scattered in one step). The optimizer updates the
shards. Differences from torch's: the gathered parameters are kept for the backward instead of
gathered again (torch's reshard_after_forward=True), and there is no prefetching or mixed precision.
"""
import torch
import torch.nn as nn

from ._dtensor import DTensorError, Replicate, Shard
from .tensor_parallel import named_mesh_dim


def _managed(module):
    """(owner module, attribute name, parameter) of every parameter under `module` that no earlier
    fully_shard call on a submodule manages; tied parameters appear once per owner."""
    out = []

    def walk(m, top):
        if not top and getattr(m, "_dtensor_fully_shard", None) is not None:
            return
        for name, p in m._parameters.items():
            if p is not None:
                out.append((m, name, p))
        for child in m._modules.values():
            if child is not None:
                walk(child, False)

    walk(module, True)
    return out


def fully_shard(module, mesh):
    """Shards the parameters `module` manages over the data-parallel dim of `mesh` (the 1-d mesh
    itself, or its dim named "dp") and gathers them around `module`'s forward (see the module
    docstring). Parameters may be plain tensors (replicated elsewhere) or bridge tensors on `mesh`
    (e.g. from parallelize_module). Returns `module`. Collective. Raises DTensorError for a mesh
    without a data-parallel dim, a module sharded twice, or a parameter on another mesh."""
    from . import torch_bridge as bridge

    if getattr(module, "_dtensor_fully_shard", None) is not None:
        raise DTensorError(f"fully_shard: {type(module).__name__} is already sharded by an earlier call")
    dp = named_mesh_dim(mesh, "dp", "fully_shard", "data-parallel mesh")
    sharded = {}  # id(original parameter) -> its sharded Parameter (tied parameters stay tied)
    entries = []
    for owner, name, p in _managed(module):
        if id(p) not in sharded:
            if isinstance(p, bridge.DTensor):
                if p.device_mesh is not mesh and list(p.device_mesh.shape) != list(mesh.shape):
                    raise DTensorError(f"fully_shard: parameter '{name}' of {type(owner).__name__} lies on "
                                       f"{p.device_mesh}, not on {mesh}")
                want = list(p.placements)
                if not want[dp].is_replicate():
                    raise DTensorError(f"fully_shard: parameter '{name}' of {type(owner).__name__} has placements "
                                       f"{want}; accepted: Replicate on the data-parallel dim {dp}")
                want[dp] = Shard(0)
                d = p.detach().redistribute(placements=want)
            else:
                want = [Replicate()] * mesh.ndim
                want[dp] = Shard(0)
                d = bridge.distribute(p.detach(), mesh, want)
            sharded[id(p)] = bridge.keep_grad_layout(nn.Parameter(d, requires_grad=p.requires_grad))
        owner._parameters[name] = sharded[id(p)]
        entries.append((owner, name, sharded[id(p)]))

    def gather(mod, args):
        gathered = {}
        for owner, name, p in entries:
            if id(p) not in gathered:
                whole = list(p.placements)
                whole[dp] = Replicate()
                gathered[id(p)] = p.redistribute(placements=whole)  # differentiable: backward reduce-scatters
            owner._parameters[name] = gathered[id(p)]

    def restore(mod, args, out):
        for owner, name, p in entries:
            owner._parameters[name] = p

    module._dtensor_fully_shard = (module.register_forward_pre_hook(gather), module.register_forward_hook(restore, always_call=True))
    return module
