# dtensor.checkpoint.save / load under a crash, run as 2 ranks under `dtensor launch`
# (tests/python/test_dcp_crash.py). argv: ROOT MODE, MODE one of
#   save V        save version V of the state (bridge tensors, uneven shards) and load it back
#   crash V       save version V, rank 1 SIGKILLed after writing its data, before the commit
#   load V        load the committed checkpoint: it must be version V, bit for bit
import os
import signal
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint.filesystem as dcp_fs

import dtensor
from dtensor import Replicate, Shard, checkpoint

root, mode, version = sys.argv[1], sys.argv[2], int(sys.argv[3])
dist.init_process_group("gloo")
rank = dist.get_rank()
mesh = dtensor.init_device_mesh("cpu", (2,))


def state(v):
    g = torch.Generator().manual_seed(v)
    return {"w": torch.randn(5, 3, generator=g, dtype=torch.float64), "b": torch.randn(4, generator=g)}


def placed(tensors):
    return {"w": dtensor.distribute_tensor(tensors["w"], mesh, [Shard(0)]),  # 5 rows: 3 and 2
            "b": dtensor.distribute_tensor(tensors["b"], mesh, [Replicate()])}


def check(v):
    got = placed({k: torch.zeros_like(t) for k, t in state(0).items()})
    folder = checkpoint.load(got, root)
    for k, want in state(v).items():
        assert torch.equal(got[k].full_tensor(), want), f"'{k}' is not version {v}'s (read {folder})"
    return folder


if mode == "crash":
    write = dcp_fs.FileSystemWriter.write_data

    def write_then_die(self, plan, planner):
        done = write(self, plan, planner)
        if rank == 1:  # this rank's data is written; the coordinator has not written the metadata yet
            done.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        return done

    dcp_fs.FileSystemWriter.write_data = write_then_die
    checkpoint.save(placed(state(version)), root)
    raise AssertionError("the save returned after rank 1 was killed")
if mode == "save":
    folder = checkpoint.save(placed(state(version)), root)
    assert checkpoint.latest(root) == folder
    print(f"rank {rank}: saved {os.path.basename(folder)}", flush=True)
folder = check(version)
print(f"rank {rank}: loaded version {version} from {os.path.basename(folder)}", flush=True)
dtensor.exit_process()
