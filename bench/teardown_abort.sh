#!/usr/bin/env bash
# How often a rank aborts at exit ("terminate called without an active exception", status -6) when
# torch's Gloo workers free a collective's tensors during the interpreter's teardown (docs/PYTHON.md,
# "Ending a job that uses torch.distributed too"): runs bench/teardown_abort_ranks.py RUNS times per
# ending ("plain", then "exit_process"), interleaved, under torchrun with 4 ranks, beside BUSY busy
# loops (the race needs a starved worker thread). Prints the aborted runs per ending; keeps each
# aborted run's output (and a core file, where the system writes them) in OUT.
#   bash bench/teardown_abort.sh [RUNS=40] [BUSY=2] [OUT=$(mktemp -d)]
# Needs torch (scripts/setup_python.sh) and the built package (bazel build //python/...).
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-40} busy=${2:-2} out=${3:-$(mktemp -d)}
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
ranks="$PWD/bench/teardown_abort_ranks.py"
pids=()
for _ in $(seq 1 "$busy"); do python3 -c "while True: pass" & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null' EXIT
declare -A aborted=([plain]=0 [exit_process]=0)
ulimit -c unlimited 2>/dev/null
for i in $(seq 1 "$runs"); do
  for ending in plain exit_process; do
    dir="$out/$ending-$i"
    mkdir -p "$dir"
    # DTENSOR_STORE: a store per run (both endings of a run share its master port).
    if (cd "$dir" && DTENSOR_STORE="file:$dir/store" timeout 300 torchrun --nproc_per_node 4 --master_port $((29500 + i % 400)) "$ranks" "$ending" \
          >log.txt 2>&1); then
      rm -rf "$dir"
    else
      aborted[$ending]=$((aborted[$ending] + 1))
      echo "run $i ($ending): $(grep -m1 -o 'terminate called[a-z ]*\|exitcode *: -\?[0-9]*' "$dir/log.txt")"
    fi
  done
done
echo "aborted: plain ${aborted[plain]} of $runs, exit_process ${aborted[exit_process]} of $runs (output of each: $out)"
