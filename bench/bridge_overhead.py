"""Per-op overhead of dtensor.bridge: `add` on 64x64 float32, S(0)+S(0) over a 4-rank threads mesh,
through the bridge (engine decision + torch's add on the 16x64 blocks) vs plain torch add on one
64x64 tensor and on one 16x64 block. Median of timeit repeats, per call, on rank 0.

    PYTHONPATH=python python3 bench/bridge_overhead.py
    PYTHONPATH=python bazel-bin/tools/dtensor launch -n 4 -- python3 bench/bridge_overhead.py  # processes
"""
import os
import statistics
import timeit

import torch

import dtensor
from dtensor import Shard, bridge

torch.set_num_threads(1)
N, REPEAT = 2000, 15


def med_us(stmt):
    return statistics.median(timeit.repeat(stmt, number=N, repeat=REPEAT)) / N * 1e6


def rank(world, concurrent):
    mesh = dtensor.init_device_mesh("cpu", (4,))
    a = bridge.distribute(torch.randn(64, 64), mesh, [Shard(0)])
    b = bridge.distribute(torch.randn(64, 64), mesh, [Shard(0)])
    if world.rank != 0 and not concurrent:
        return None  # S(0)+S(0) needs no collective: rank 0 times alone, without GIL contention
    for _ in range(100):
        a + b  # warm the propagation cache and the handler cache
    out = {"bridge": med_us(lambda: a + b)}
    la, lb = a._local, b._local
    out["torch_block"] = med_us(lambda: la + lb)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    out["torch_full"] = med_us(lambda: x + y)
    assert (a + b).placements == (Shard(0),)
    return out


if __name__ == "__main__":
    if "RANK" in os.environ:  # a process rank of `dtensor launch`: every rank times at once, no shared GIL
        r = rank(dtensor.init_process_group(), True)
        if int(os.environ["RANK"]) == 0:
            print("4 process ranks timing at once:")
            print(f"  bridge add (S(0)+S(0), 64x64 f32): {r['bridge']:.1f} us/op (median)")
            print(f"  torch add on the 16x64 block:      {r['torch_block']:.1f} us/op")
            print(f"  torch add on 64x64:                {r['torch_full']:.1f} us/op")
        raise SystemExit(0)
    for concurrent in (False, True):
        r0 = dtensor.run_threads(4, lambda w: rank(w, concurrent))[0]
        print("all 4 ranks timing at once (they share the GIL):" if concurrent else
              "rank 0 timing alone (ranks 1-3 idle):")
        print(f"  bridge add (S(0)+S(0), 64x64 f32): {r0['bridge']:.1f} us/op (median)")
        print(f"  torch add on the 16x64 block:      {r0['torch_block']:.1f} us/op")
        print(f"  torch add on 64x64:                {r0['torch_full']:.1f} us/op")
        print(f"  bridge overhead over the block:    {r0['bridge'] - r0['torch_block']:.1f} us/op")
