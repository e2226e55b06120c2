#!/usr/bin/env bash
# Sanitizer runs (docs/RELIABILITY.md), part of the README's test command:
#   - AddressSanitizer + UndefinedBehaviorSanitizer (any finding fails the test) over the tests of
#     every layer that takes sizes, bytes or files from outside: core tensors and DLPack, the
#     redistribution, the engine and explain, checkpoints, the command line, the fuzz targets, and
#     the planner's graph builder over every zoo model;
#   - ThreadSanitizer over the threads backend and the tests whose ranks are threads sharing caches.
# Prints "sanitizers: N passed, N failed" and exits non-zero when a target fails.
set -uo pipefail
cd "$(dirname "$0")/.."

ASAN_TARGETS=(
  //tests/core/...
  //tests/dtensor:redistribute_test
  //tests/threads/...
  //tests/propagation/...
  //tests/tools:explain_hostile_test
  //tests/tools:explain_test
  //tests/nn:checkpoint_test
  //tests/planner:zoo_test
  //tests/fuzz/...
)
TSAN_TARGETS=(
  //tests/threads/...
  //tests/dtensor:redistribute_test
)

passed=0
failed=0
run() {  # run CONFIG TARGETS...: bazel test under a sanitizer config, counting targets
  local config="$1" log
  shift
  log=$(mktemp)
  bazel test --config="$config" --nocache_test_results --test_summary=short "$@" 2>&1 | grep -v '^INFO: From\|^(\|^\[' | tee "$log" | grep -E '^//|^ERROR|Executed'
  passed=$((passed + $(grep -cE '^//.* +PASSED' "$log")))
  failed=$((failed + $(grep -cE '^//.* +(FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log")))
  grep -q '^FAILED: Build did NOT complete' "$log" && failed=$((failed + 1))
  rm -f "$log"
}
# The fuzz targets try 20000 inputs each in the plain build; under ASan, where each input costs
# several times more, 3000 each keep the run within CI's budget.
run asan --test_env=DTENSOR_FUZZ_RUNS=3000 "${ASAN_TARGETS[@]}"
run tsan "${TSAN_TARGETS[@]}"
echo "sanitizers: ${passed} passed, ${failed} failed"
[ "$failed" -eq 0 ]
