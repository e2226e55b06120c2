"""Per-op time from Python, side by side in one run: plain torch, torch DTensor, dtensor.

    bazel build //python/... && PYTHONPATH=python python3 bench/python_ops_vs_torch.py [--reps N]

Ops and layouts are those of the per-op overhead target (BENCHMARKS.md, "Per-op time from
Python"): `add` of 64x64 S(0)+S(0) and `mm` of 64x64 S(0)@R over a 4-rank mesh (both need no
communication, so the time is the op's overhead plus the local kernel on a 16x64 block). Rows:
  torch (64x64)           plain torch on the whole tensors, one device
  torch (local 16x64)     plain torch on one rank's block: the local kernel every sharded run pays
  torch DTensor           torch.distributed.tensor on a 4-rank fake process group (rank 0 of 4)
  dtensor ops.<name>      dtensor from Python on 4 thread ranks (rank 0 times, the others wait)
  dtensor ops.call        the same op through the by-name path (argument parsing by schema)
  dtensor bridge          ordinary torch code on dtensor's torch subclass, when dtensor.bridge exists
                          (its native __torch_dispatch__, then the all-Python one it replaced)
Each figure is the median over --rounds rounds of --reps calls, in microseconds per call (wall time,
or with --clock thread the timing thread's CPU time, for machines shared with other load).
"""
import argparse
import statistics
import threading
import time

import numpy as np

import dtensor
from dtensor import Replicate, Shard


CLOCK = time.perf_counter  # --clock thread: the timing thread's CPU time (time.thread_time)


def per_call_us(fn, reps, rounds):
    fn()  # warm: caches, first-touch allocations
    times = []
    for _ in range(rounds):
        t0 = CLOCK()
        for _ in range(reps):
            fn()
        times.append((CLOCK() - t0) / reps * 1e6)
    return statistics.median(times)


def torch_rows(torch, a, b, reps, rounds):
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    la, lb = ta[:16].contiguous(), tb[:16].contiguous()
    return {
        ("add", "torch (64x64)"): per_call_us(lambda: torch.add(ta, tb), reps, rounds),
        ("mm", "torch (64x64)"): per_call_us(lambda: torch.mm(ta, tb), reps, rounds),
        ("add", "torch (local 16x64)"): per_call_us(lambda: torch.add(la, lb), reps, rounds),
        ("mm", "torch (local 16x64)"): per_call_us(lambda: torch.mm(la, tb), reps, rounds),
    }


def torch_dtensor_rows(torch, a, b, reps, rounds):
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate as TR, Shard as TS, distribute_tensor
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=4)
    try:
        mesh = init_device_mesh("cpu", (4,))
        xa = distribute_tensor(torch.from_numpy(a), mesh, [TS(0)])
        xb = distribute_tensor(torch.from_numpy(b), mesh, [TS(0)])
        wb = distribute_tensor(torch.from_numpy(b), mesh, [TR()])
        return {
            ("add", "torch DTensor"): per_call_us(lambda: torch.add(xa, xb), reps, rounds),
            ("mm", "torch DTensor"): per_call_us(lambda: torch.mm(xa, wb), reps, rounds),
        }
    finally:
        dist.destroy_process_group()


def dtensor_rows(torch, a, b, reps, rounds):
    rows = {}
    done = threading.Event()

    def rank(world):
        mesh = dtensor.init_device_mesh("cpu", (4,))
        xa = dtensor.distribute_tensor(a, mesh, [Shard(0)])
        xb = dtensor.distribute_tensor(b, mesh, [Shard(0)])
        wb = dtensor.distribute_tensor(b, mesh, [Replicate()])
        if world.rank != 0:
            done.wait()  # neither op communicates: rank 0 alone times them
            return
        try:
            rows[("add", "dtensor ops.add")] = per_call_us(lambda: dtensor.ops.add(xa, xb), reps, rounds)
            rows[("mm", "dtensor ops.mm")] = per_call_us(lambda: dtensor.ops.mm(xa, wb), reps, rounds)
            call = dtensor.ops.call
            rows[("add", "dtensor ops.call")] = per_call_us(lambda: call("add", xa, xb), reps, rounds)
            rows[("mm", "dtensor ops.call")] = per_call_us(lambda: call("mm", xa, wb), reps, rounds)
            bridge = getattr(dtensor, "bridge", None)
            if torch is not None and bridge is not None and hasattr(bridge, "distribute"):
                ta, tb = torch.from_numpy(a), torch.from_numpy(b)
                ba = bridge.distribute(ta, mesh, [Shard(0)])
                bb = bridge.distribute(tb, mesh, [Shard(0)])
                bw = bridge.distribute(tb, mesh, [Replicate()])
                rows[("add", "dtensor bridge (torch.add)")] = per_call_us(lambda: torch.add(ba, bb), reps, rounds)
                rows[("mm", "dtensor bridge (torch.mm)")] = per_call_us(lambda: torch.mm(ba, bw), reps, rounds)
                if hasattr(bridge, "_use_native_dispatch"):  # the all-Python dispatch, for comparison
                    bridge._use_native_dispatch(False)
                    try:
                        rows[("add", "dtensor bridge, Python dispatch")] = per_call_us(
                            lambda: torch.add(ba, bb), reps, rounds)
                        rows[("mm", "dtensor bridge, Python dispatch")] = per_call_us(
                            lambda: torch.mm(ba, bw), reps, rounds)
                    finally:
                        bridge._use_native_dispatch(True)
        finally:
            done.set()

    dtensor.run_threads(4, rank)
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=2000, help="calls per round")
    p.add_argument("--rounds", type=int, default=7, help="rounds; the median is reported")
    p.add_argument("--clock", choices=("wall", "thread"), default="wall",
                   help="wall: elapsed time; thread: the timing thread's CPU time, which leaves out "
                        "time the thread spends preempted (steadier on a shared, loaded machine)")
    args = p.parse_args()
    global CLOCK
    CLOCK = time.thread_time if args.clock == "thread" else time.perf_counter
    if args.reps < 1 or args.rounds < 1:
        p.error("--reps and --rounds must be >= 1")

    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    b = rng.standard_normal((64, 64)).astype(np.float32)
    try:
        import torch
        torch.set_num_threads(1)  # one rank's share of the cores, as dtensor's thread ranks get
    except ImportError:
        torch = None
        print("torch is not installed: only dtensor's rows (scripts/setup_python.sh installs it)")

    rows = {}
    if torch is not None:
        rows.update(torch_rows(torch, a, b, args.reps, args.rounds))
        rows.update(torch_dtensor_rows(torch, a, b, args.reps, args.rounds))
    rows.update(dtensor_rows(torch, a, b, args.reps, args.rounds))

    print(f"{'op':<4} {'run':<30} {'us/call':>9}")
    for op in ("add", "mm"):
        for (o, name), us in rows.items():
            if o == op:
                print(f"{op:<4} {name:<30} {us:9.2f}")


if __name__ == "__main__":
    main()
