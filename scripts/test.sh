#!/usr/bin/env bash
# Installs what the build needs, builds everything (CUDA sources included) and runs every test, the
# conformance cases and the sanitizer runs (scripts/sanitize.sh). Ends with a plain
# "tests: N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh || exit 1
# Before Bazel's first run: @python_config looks for nanobind once per Bazel server.
bash scripts/setup_python.sh || exit 1
log=$(mktemp)
# --nocache_test_results: every run executes the tests (the disk cache would otherwise replay
# earlier results, hiding a flaky test).
bazel test --nocache_test_results --test_summary=short //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//.* +PASSED' "$log" || true)
failed=$(grep -cE '^//.* +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
rm -f "$log"
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
# The Python package's tests (tests/python, pytest): each test counts as one.
py_log=$(mktemp)
if bazel build //python/... >/dev/null 2>&1; then
  "${DTENSOR_PYTHON:-python3}" -m pytest -q -p no:cacheprovider tests/python 2>&1 | tee "$py_log"
  py_rc=${PIPESTATUS[0]}
  py_summary=$(tail -1 "$py_log")
  py_passed=$(grep -oE '[0-9]+ passed' <<<"$py_summary" | grep -oE '[0-9]+' || echo 0)
  py_failed=0
  for n in $(grep -oE '[0-9]+ (failed|errors?)' <<<"$py_summary" | grep -oE '^[0-9]+'); do
    py_failed=$((py_failed + n))
  done
  passed=$((passed + py_passed))
  failed=$((failed + py_failed))
  if [ "$py_rc" -ne 0 ]; then
    rc=1
    [ "$py_failed" -eq 0 ] && failed=$((failed + 1))
  fi
else
  echo "python: bazel build //python/... failed"
  failed=$((failed + 1)); rc=1
fi
rm -f "$py_log"
echo "tests: ${passed} passed, ${failed} failed"
exit "$rc"
