#!/usr/bin/env bash
# Installs what the build needs, builds everything (CUDA sources included) and runs every test.
# Ends with a plain "N passed, N failed" line.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh || exit 1
log=$(mktemp)
bazel test --test_summary=short //... 2>&1 | tee "$log"
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
echo "tests: ${passed} passed, ${failed} failed"
exit "$rc"
