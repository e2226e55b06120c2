#!/usr/bin/env bash
# Regenerates BENCHMARKS.md's calibrate table: two `dtensor calibrate` runs on 4 Gloo processes under
# the same load, one to fit (PREFIX-fit.json) and one to check (PREFIX-check.json), then the check
# run's measurements against the fit run's predictions (bench/calibration_table.py --check) and the
# fit run against its own measurements. Prints the date, machine and load average before and after.
#
#   bash bench/calibrate_gloo.sh [PREFIX]     (default PREFIX: bench/calibration/gloo-4ranks)
#
# Extra calibrate flags can be given in CALIBRATE_FLAGS (default: --sizes 8:64M --iters 30
# --budget 1.5 --rounds 3).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${1:-bench/calibration/gloo-4ranks}
flags=${CALIBRATE_FLAGS:---sizes 8:64M --iters 30 --budget 1.5 --rounds 3}
bazel build //tools:dtensor >&2
dt=bazel-bin/tools/dtensor
echo "# $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for run in fit check; do
  # shellcheck disable=SC2086
  "$dt" launch -n 4 -- "$dt" calibrate --backend gloo $flags --out "$prefix-$run.json" > /dev/null
  echo "# $run run done $(date -u '+%H:%M:%S UTC'), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo
echo "## Check: measurements of the check run against the fit run's profile"
echo
python3 bench/calibration_table.py "$prefix-fit.json" --check "$prefix-check.json"
echo
echo "## Fit: the fit run against its own measurements"
echo
python3 bench/calibration_table.py "$prefix-fit.json" | tail -n 1
