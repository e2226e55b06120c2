#!/usr/bin/env bash
# Every transition and size of bench/redistribute_gloo_bench.cc (--interleave: each iteration times
# DTensor and the direct Gloo call back to back) over RUNS separate runs (default 9) of 4 Gloo
# processes, then one table: per (size, op) the median over runs of each run's DTensor / direct
# ratio, with its min-max, for wall time (slowest rank) and CPU time (all ranks), and the headline:
# the worst median from 1 MB. The load average before and after is printed with the date, for
# the conditions the figures were taken in.
#
#   bazel build //bench:redistribute_gloo_bench //tools:dtensor && bash bench/redistribute_gloo_runs.sh [RUNS] [FILTER]
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-9}"
filter="${2:-/(1|16|64)MB/}"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) cores"
for r in $(seq 1 "$runs"); do
  bazel-bin/tools/dtensor launch -n 4 -- bazel-bin/bench/redistribute_gloo_bench --interleave \
    --benchmark_filter="$filter" >"$out/run$r.txt" 2>&1
done
echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC'); load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" "$runs" <<'PY'
import glob, re, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
rows = {}  # (size, op) -> list of (wall ratio, cpu ratio)
order = []
for path in sorted(glob.glob(out + "/run*.txt")):
    text = open(path).read()
    table = text.split("Median per iteration", 1)
    if len(table) < 2:
        sys.exit(f"{path}: no table; output:\n{text[-2000:]}")
    for line in table[1].splitlines():
        m = re.match(r"^(\S+)\s+(\S+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)$", line)
        if not m:
            continue
        key = (m.group(1), m.group(2))
        if key not in rows:
            rows[key] = []
            order.append(key)
        rows[key].append((float(m.group(5)), float(m.group(8))))
def cell(v):
    return f"{statistics.median(v):.2f} ({min(v):.2f}-{max(v):.2f})"
print(f"\n| size | op | runs | wall ratio, median (min-max) | CPU ratio, median (min-max) |")
print("|---:|---|---:|---:|---:|")
worst = None
for key in order:
    w = [a for a, _ in rows[key]]
    c = [b for _, b in rows[key]]
    print(f"| {key[0]} | {key[1]} | {len(w)} | {cell(w)} | {cell(c)} |")
    if worst is None or statistics.median(w) > worst[0]:
        worst = (statistics.median(w), key)
    if len(w) != runs:
        sys.exit(f"{key}: {len(w)} runs of {runs} reported")
print(f"\nworst wall median: {worst[0]:.2f} ({worst[1][1]} at {worst[1][0]})")
PY
