#!/usr/bin/env bash
# Installs what the build needs, builds everything (CUDA sources included) and runs every test, the
# conformance cases, the GPU check's bundle (scripts/gpu_bundle.sh, then scripts/gpu_run.sh from it:
# every binary loads, and without a GPU it says so), the sanitizer runs (scripts/sanitize.sh) and the
# Python tests. Ends with a plain "tests: N passed, N failed, N skipped" line; above it, each skipped
# group and why (scripts/test_counts.py: a Bazel test whose every case skipped counts as skipped, as
# does every pytest skip), and each stage's time.
set -uo pipefail
cd "$(dirname "$0")/.."
stages=()
stage_start=$(date +%s)
stage_done() {  # name: records the time since the last stage ended
  local now
  now=$(date +%s)
  stages+=("$1 $((now - stage_start)) s")
  stage_start=$now
}
skip_lines=()
add_counts() {  # the output of scripts/test_counts.py: skipped lines and "counts: P F S"
  local line
  while IFS= read -r line; do
    case "$line" in
      counts:*)
        read -r _ p f s <<<"$line"
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s)) ;;
      skipped:*) skip_lines+=("$line") ;;
    esac
  done <<<"$1"
}
passed=0 failed=0 skipped=0
bash scripts/install_deps.sh || exit 1
# Before Bazel's first run: @python_config looks for nanobind once per Bazel server.
bash scripts/setup_python.sh || exit 1
stage_done "install"
log=$(mktemp)
# --nocache_test_results: every run executes the tests (the disk cache would otherwise replay
# earlier results, hiding a flaky test).
bazel test --nocache_test_results --test_summary=short //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
add_counts "$(python3 scripts/test_counts.py bazel "$log" "$(bazel info bazel-testlogs 2>/dev/null)")"
if grep -q '^FAILED: Build did NOT complete' "$log"; then failed=$((failed + 1)); fi
rm -f "$log"
stage_done "bazel build and test"
# The shared conformance cases, when the shared folder sits beside the repo: every line must match.
shared=../shared/conformance/public.jsonl
if [ "$rc" -eq 0 ] && [ -f "$shared" ]; then
  if bazel-bin/tools/dtensor explain --cases "$shared" | grep -q '"expect_match":false\|"error"'; then
    echo "conformance: ../shared/conformance/public.jsonl has failing cases"
    failed=$((failed + 1)); rc=1
  else
    echo "conformance: every case of $shared passes"
  fi
fi
# The GPU check's bundle: built under its size limit, and its runner loads every binary from it. On a
# machine without a GPU the runner must end with "no GPU visible" (77); with one, every step passes.
bundle_dir=$(mktemp -d)
if [ ! -x "${CUDA_PATH:-/usr/local/cuda}/bin/nvcc" ]; then
  skipped=$((skipped + 1))
  skip_lines+=("skipped: the GPU check's bundle (no CUDA toolkit at ${CUDA_PATH:-/usr/local/cuda}: the GPU tests are not built)")
elif SKIP_INSTALL_DEPS=1 bash scripts/gpu_bundle.sh "$bundle_dir/b" >"$bundle_dir/log" 2>&1; then
  tail -1 "$bundle_dir/log"
  OUT="$bundle_dir/out" bash "$bundle_dir/b/run.sh" --quick --sanitize='Pooling.*' >"$bundle_dir/run.log" 2>&1
  run_rc=$?
  tail -3 "$bundle_dir/run.log"
  # A flag without its value is refused (exit 2) before anything runs; the baseline travels.
  bash "$bundle_dir/b/run.sh" --sanitize= >"$bundle_dir/flag.log" 2>&1
  flag_rc=$?
  if [ "$flag_rc" -ne 2 ] || [ ! -s "$bundle_dir/b/gpu_baseline.json" ]; then
    echo "gpu check: run.sh --sanitize= exited $flag_rc (want 2), or the bundle lacks gpu_baseline.json"
    failed=$((failed + 1)); rc=1
  elif [ "$run_rc" -eq 77 ] && grep -q 'every binary of the bundle loads' "$bundle_dir/run.log"; then
    passed=$((passed + 1))
    echo "gpu check: the bundle loads here; no GPU visible, so its GPU steps did not run"
  elif [ "$run_rc" -eq 0 ]; then
    passed=$((passed + 1))
  else
    echo "gpu check: scripts/gpu_run.sh exited $run_rc"
    failed=$((failed + 1)); rc=1
  fi
else
  tail -20 "$bundle_dir/log"
  echo "gpu check: scripts/gpu_bundle.sh failed"
  failed=$((failed + 1)); rc=1
fi
rm -rf "$bundle_dir"
stage_done "GPU bundle"
# Sanitizer builds of the input-facing tests (scripts/sanitize.sh): counted with the others.
san_log=$(mktemp)
bash scripts/sanitize.sh 2>&1 | tee "$san_log"
san_rc=${PIPESTATUS[0]}
san=$(grep -E '^sanitizers: [0-9]+ passed, [0-9]+ failed' "$san_log" | tail -1)
rm -f "$san_log"
if [ -n "$san" ]; then
  passed=$((passed + $(sed -E 's/^sanitizers: ([0-9]+) passed.*/\1/' <<<"$san")))
  failed=$((failed + $(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$san")))
fi
if [ "$san_rc" -ne 0 ]; then
  rc=1
  [ -z "$san" ] && failed=$((failed + 1))
fi
stage_done "sanitizers"
# The Python package's tests (tests/python, pytest): each test counts as one; -rs lists skip reasons.
# Two workers (pytest-xdist), a test file each at a time (its module fixtures, such as op_db's run,
# are computed once): most tests are one Python thread, and alone they left a core of CI's two idle.
py_log=$(mktemp)
coverage_lines=()
if bazel build //python/... >/dev/null 2>&1; then
  "${DTENSOR_PYTHON:-python3}" -m pytest -q -rs -p no:cacheprovider -n 2 --dist loadfile tests/python 2>&1 | tee "$py_log"
  py_rc=${PIPESTATUS[0]}
  before=$failed
  add_counts "$(python3 scripts/test_counts.py pytest "$py_log")"
  # The op_db and Core ATen coverage lines (tests/python/test_opdb.py, test_core_aten.py, test_opinfo.py), repeated
  # in the closing summary.
  mapfile -t coverage_lines < <(grep -E "^(op_db (forward|backward):|Core ATen:|Core ATen packets compared|Core ATen native packets compared)" "$py_log")
  # With torch installed each of them must be there: one that stops being printed (a renamed summary,
  # a test that no longer reaches it) fails here instead of leaving the closing summary unnoticed.
  if "${DTENSOR_PYTHON:-python3}" -c "import torch, expecttest" >/dev/null 2>&1; then
    for want in "op_db forward:" "op_db backward:" "Core ATen:" "Core ATen packets compared" \
                "Core ATen native packets compared"; do
      if ! printf '%s\n' "${coverage_lines[@]}" | grep -q "^$want"; then
        echo "python: no '$want' line in the pytest output (tests/python/test_opdb.py, test_core_aten.py, test_opinfo.py print it)"
        failed=$((failed + 1)); rc=1
      fi
    done
  fi
  if [ "$py_rc" -ne 0 ]; then
    rc=1
    [ "$failed" -eq "$before" ] && failed=$((failed + 1))
  fi
else
  echo "python: bazel build //python/... failed"
  failed=$((failed + 1)); rc=1
fi
rm -f "$py_log"
stage_done "python"
echo "stage times: $(IFS=';'; echo "${stages[*]}" | sed 's/;/; /g')"
for line in "${skip_lines[@]}"; do echo "$line"; done
for line in "${coverage_lines[@]}"; do echo "$line"; done
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$rc"
