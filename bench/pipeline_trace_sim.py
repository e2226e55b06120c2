#!/usr/bin/env python3
"""Replays a pipeline schedule with the op durations one step measured, transfers free.

Reads the stderr of `DTENSOR_PIPELINE_TRACE=1 dtensor train --mesh pp=P ...` (nn/pipeline.h), takes
each rank's last step (its last 2 m v op lines), and runs the same orders with those durations and
no transfer time: the bubble the schedule and the measured op times alone imply, to set beside the
measured bubble (which adds waiting in the exchanges) and the planner's (uniform op times).

Usage: bench/pipeline_trace_sim.py TRACE P V M
"""
import collections
import sys


def main():
    path, p, v, m = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    ops = collections.defaultdict(list)  # rank -> [(name, duration ms)]
    for line in open(path):
        f = line.split()
        if len(f) == 6 and f[0] == "pipeline-trace" and not f[3].startswith("exchange"):
            ops[int(f[2])].append((f[3], float(f[5]) - float(f[4])))
    chunks, n = p * v, 2 * m * v
    sched = {r: ops[r][-n:] for r in range(p)}
    done, free, nxt = {}, [0.0] * p, [0] * p
    progress = True
    while progress:
        progress = False
        for r in range(p):
            while nxt[r] < len(sched[r]):
                name, d = sched[r][nxt[r]]
                mb, c = map(int, name[1:].split("."))
                deps = [("F", mb, c - 1)] if name[0] == "F" and c > 0 else []
                if name[0] == "B":
                    deps = [("F", mb, c)] + ([("B", mb, c + 1)] if c + 1 < chunks else [])
                if any(x not in done for x in deps):
                    break
                start = max([free[r]] + [done[x] for x in deps])
                done[(name[0], mb, c)] = free[r] = start + d
                nxt[r] += 1
                progress = True
    busy = [sum(d for _, d in sched[r]) for r in range(p)]
    makespan = max(free)
    print("op time per rank (ms): %s; makespan with these op times, transfers free: %.1f ms; bubble %.3f"
          % (", ".join("%.1f" % b for b in busy), makespan, 1 - sum(busy) / (p * makespan)))


if __name__ == "__main__":
    main()
