#!/usr/bin/env bash
# The dtensor command runs OpenBLAS's kernels for this CPU: on a CPU with AVX2 and FMA, never the
# generic SSE3 "Prescott" (or "Core2") kernels that OpenBLAS 0.3.21 falls back to for CPU models newer
# than itself (kernels/cpu/blas_core.h; about 3x slower sgemm). OPENBLAS_VERBOSE=2 makes the library
# print "Core: NAME" when it loads; the last line is the process that runs.
set -uo pipefail
bin="$1"
if ! grep -qw avx2 /proc/cpuinfo || ! grep -qw fma /proc/cpuinfo; then
  echo "this CPU has no AVX2/FMA: the generic kernels are the right ones, nothing to check"
  exit 0
fi
core=$(OPENBLAS_VERBOSE=2 "$bin" train --steps 1 --sample 0 --log-every 1 2>&1 | grep -o 'Core: [A-Za-z0-9]*' | tail -1)
echo "dtensor train runs with OpenBLAS ${core:-<no Core line>}"
case "$core" in
  "Core: Prescott" | "Core: Core2" | "") echo "FAILED: generic kernels on a CPU with AVX2/FMA"; exit 1 ;;
esac
# The user's choice stands: an explicit OPENBLAS_CORETYPE is not replaced.
core=$(OPENBLAS_CORETYPE=Haswell OPENBLAS_VERBOSE=2 "$bin" train --steps 1 --sample 0 2>&1 | grep -o 'Core: [A-Za-z0-9]*' | tail -1)
[ "$core" = "Core: Haswell" ] || { echo "FAILED: OPENBLAS_CORETYPE=Haswell gave $core"; exit 1; }
echo "ok"
