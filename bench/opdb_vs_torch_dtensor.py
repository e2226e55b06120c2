"""PyTorch's op_db through dtensor's bridge and through PyTorch DTensor, side by side.

    bazel build //python/... && python3 bench/opdb_vs_torch_dtensor.py [--entries N] [--json FILE]

The same cases on both sides (tests/python/opdb_oracle.py: every OpInfo entry's first samples,
seeded random placements on a [2, 2] mesh, random Partial pieces, forward and backward against torch
on one device): PyTorch DTensor (torch.distributed.tensor) on 4 Gloo processes started here, the
bridge on 4 thread ranks of this process. Prints, per side, how many entries pass forward and
backward, the entries each passes that the other does not, and the failures of each by kind.
"""
import argparse
import collections
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
sys.path.insert(0, os.path.join(ROOT, "python"))


def run_side(engine, limit, start=0, each=None):
    import opdb_oracle as oracle
    out = {}
    for e in oracle.entries()[start:limit]:
        rows = oracle.run_entry(engine, e)
        name = oracle.entry_name(e)
        out[name] = {
            "forward": oracle.entry_status(rows, "forward"),
            "backward": oracle.entry_status(rows, "backward"),
            "detail": next((r[3] for r in rows if r[1] in ("error", "mismatch") or r[2] in ("error", "mismatch")), ""),
        }
        if each is not None:
            each(name, out[name])
    return out


def torch_rank(args):
    """One Gloo rank: the entries from --start on; rank 0 appends each entry's result to --result
    (one JSON line each) as it finishes, so the parent sees progress and where a hang is."""
    import datetime

    import torch.distributed as dist
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    import torch
    torch.set_num_threads(1)
    import opdb_oracle as oracle

    def each(name, res):
        if dist.get_rank() == 0:
            with open(args.result, "a") as f:
                f.write(json.dumps([name, res]) + "\n")

    run_side(oracle.TorchEngine((2, 2)), args.entries, args.start, each)
    dist.barrier()
    dist.destroy_process_group()


def run_torch_side(limit, stall_s=90):
    """PyTorch DTensor over the entries on 4 Gloo processes. An entry with no result after stall_s
    (its collectives wait forever: ranks that issue different collectives) is recorded as a hang;
    the ranks are killed and restarted after it. An entry whose result is a Gloo transport error (a
    peer's connection reset: a rank died or left the collectives of an earlier entry, and every
    later entry of that run would fail the same way) is not PyTorch DTensor's answer: the ranks are
    restarted and it is run again once, on fresh connections; only a second transport error counts."""
    import opdb_oracle as oracle
    names = [oracle.entry_name(e) for e in oracle.entries()][:limit]
    results, retried = {}, set()
    with tempfile.TemporaryDirectory() as tmp:
        result = os.path.join(tmp, "torch.jsonl")
        while len(results) < len(names):
            start = len(results)
            open(result, "w").close()
            env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), WORLD_SIZE="4",
                       PYTHONWARNINGS="ignore")
            cmd = [sys.executable, os.path.abspath(__file__), "--result", result, "--start", str(start)]
            if limit:
                cmd += ["--entries", str(limit)]
            procs = [subprocess.Popen(cmd + ["--rank", str(r)], env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in range(4)]
            seen, last, broken = 0, time.time(), False
            while not broken:
                time.sleep(1)
                lines = open(result).read().splitlines()
                for line in lines[seen:]:
                    name, res = json.loads(line)
                    if _transport_error(res["detail"]) and name not in retried:
                        retried.add(name)
                        broken = True
                        print(f"PyTorch DTensor: {name}: {res['detail'][:80]}...; restarting the ranks and "
                              f"running it again", file=sys.stderr)
                        break
                    results[name] = res
                if len(lines) > seen:
                    seen, last = len(lines), time.time()
                done = all(p.poll() is not None for p in procs)
                if done or time.time() - last > stall_s:
                    break
            for p in procs:
                p.kill()
                p.wait()
            if broken:
                continue
            if len(results) < len(names) and (not done or seen == 0 or any(p.returncode for p in procs)):
                stuck = names[len(results)]
                results[stuck] = {"forward": "error", "backward": "error",
                                  "detail": f"error: hang: no result after {stall_s} s (the ranks were killed)"}
                print(f"PyTorch DTensor: {stuck} hung; restarting the ranks after it", file=sys.stderr)
    return results


def _transport_error(detail):
    """True for Gloo's errors about the connection itself (not about the op)."""
    return "gloo/transport" in detail or "Connection reset by peer" in detail or "Connection closed by peer" in detail


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=None, help="only the first N op_db entries")
    ap.add_argument("--json", help="write both sides' per-entry results here")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rank is not None:
        return torch_rank(args)

    t0 = time.time()
    torch_res = run_torch_side(args.entries)
    t_torch = time.time() - t0
    import opdb_oracle as oracle
    t0 = time.time()
    ours = run_side(oracle.BridgeEngine((2, 2)), args.entries)
    t_ours = time.time() - t0

    names = sorted(ours)
    print(f"op_db: {len(names)} entries, [2, 2] mesh, the first {oracle.MAX_SAMPLES} samples each "
          f"(PyTorch DTensor {t_torch:.0f} s on 4 Gloo processes, dtensor.bridge {t_ours:.0f} s on 4 threads)")
    print(f"{'':18} {'dtensor.bridge':>16} {'PyTorch DTensor':>16}")
    for which in ("forward", "backward"):
        for st in ("pass", "not compared", "error", "mismatch"):
            a = sum(ours[n][which] == st for n in names)
            b = sum(torch_res[n][which] == st for n in names)
            print(f"{which + ' ' + st:18} {a:16} {b:16}")
    for which in ("forward", "backward"):
        only_ours = [n for n in names if ours[n][which] == "pass" and torch_res[n][which] != "pass"]
        only_torch = [n for n in names if torch_res[n][which] == "pass" and ours[n][which] != "pass"]
        print(f"\n{which}: passed by dtensor.bridge only ({len(only_ours)}): {' '.join(only_ours)}")
        print(f"{which}: passed by PyTorch DTensor only ({len(only_torch)}):")
        for n in only_torch:
            print(f"  {n}: dtensor {ours[n][which]}: {ours[n]['detail'][:150]}")
    for side, res in (("PyTorch DTensor", torch_res), ("dtensor.bridge", ours)):
        mism = [n for n in names if "mismatch" in (res[n]["forward"], res[n]["backward"])]
        print(f"\n{side}: wrong results without an error ({len(mism)}):")
        for n in mism:
            print(f"  {n}: {res[n]['detail'][:150]}")
        kinds = collections.Counter(res[n]["detail"].split(":")[1].strip() for n in names
                                    if res[n]["detail"].startswith("error"))
        print(f"{side}: errors by exception type: {dict(kinds.most_common())}")
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"dtensor.bridge": ours, "PyTorch DTensor": torch_res}, f, indent=1)
        os.replace(tmp, args.json)


if __name__ == "__main__":
    main()
