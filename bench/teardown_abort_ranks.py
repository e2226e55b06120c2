"""The ranks of bench/teardown_abort.sh: torch-only work (gloo, a 2-d DeviceMesh, DTensor matmuls and
their backward, an all_reduce), then destroy_process_group ("plain": the interpreter's teardown
follows) or dtensor.exit_process() ("exit_process"). Run with torchrun --nproc_per_node 4."""
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

torch.set_num_threads(1)
dist.init_process_group("gloo")
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
w = distribute_tensor(torch.randn(64, 64, requires_grad=True), mesh, [Replicate(), Shard(0)])
x = distribute_tensor(torch.randn(8, 64), mesh, [Shard(0), Replicate()])
for _ in range(5):
    (x @ w.t()).sum().backward()
t = torch.tensor([1.0])
dist.all_reduce(t)
print("rank", dist.get_rank(), "ok", flush=True)
if sys.argv[1] == "exit_process":
    import dtensor
    dtensor.exit_process()
dist.destroy_process_group()
