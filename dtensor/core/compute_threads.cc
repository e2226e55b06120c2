#include "dtensor/core/compute_threads.h"

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <cblas.h>

#include "absl/strings/numbers.h"
#include "dtensor/core/error.h"

namespace dtensor {

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int threads_per_rank(int ranks_sharing) { return std::max(1, available_cores() / std::max(1, ranks_sharing)); }

int compute_threads_from_env() {
  for (const char* name : {"OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* v = std::getenv(name);
    int n = 0;
    if (v != nullptr && absl::SimpleAtoi(v, &n) && n >= 1) return n;
  }
  return 0;
}

void set_blas_threads(int n) {
  DT_CHECK(n >= 1, "set_blas_threads: ", n, " threads; accepted: 1 or more");
  openblas_set_num_threads(n);
}

int blas_threads() { return openblas_get_num_threads(); }

}  // namespace dtensor
