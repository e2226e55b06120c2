// The thread policy for compute (BLAS and any OpenMP code) of ranks that share a machine: the cores
// the process may run on, divided by the ranks sharing them, at least 1 — torchrun's reason for
// OMP_NUM_THREADS=1, generalized, so that N ranks on C cores run C compute threads, not N x C. The
// user's $OMP_NUM_THREADS / $OPENBLAS_NUM_THREADS, or a flag, win over it.
#pragma once

namespace dtensor {

// Cores this process may run on (its CPU affinity mask; std::thread::hardware_concurrency when the
// mask cannot be read), at least 1.
int available_cores();

// available_cores() / ranks_sharing, at least 1. ranks_sharing < 1 counts as 1.
int threads_per_rank(int ranks_sharing);

// $OPENBLAS_NUM_THREADS, else $OMP_NUM_THREADS, when set to an integer >= 1; else 0 (not set, or not
// an integer >= 1).
int compute_threads_from_env();

// Threads OpenBLAS uses for one call of this process (the policy above decides how many). Applies to
// later calls from any thread. Throws dtensor::Error for n < 1.
void set_blas_threads(int n);
int blas_threads();

}  // namespace dtensor
