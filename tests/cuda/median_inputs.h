// Inputs shared by the CUDA median's GPU test (median_test) and its CPU emulation
// (selection_plan_test), so that both check the same data.
#pragma once

#include <cstdint>
#include <vector>

namespace dtensor::cuda::testing {

// 2^18 elements whose median is a zero: 1001 zeros at j = 261 q (q = 0..1000), the other
// elements distinct integers, 130571 negative and 130572 positive, in a scrambled order. The zeros
// take ranks 130571 .. 131571, so rank (n - 1) / 2 = 131071 holds zero q = 500 of the stable order.
// zeros: 0 all +0.0, 1 all -0.0, 2 -0.0 for even q (the stable order's zero at the rank is -0.0).
template <typename V>
std::vector<V> zero_median_input(int zeros) {
  constexpr int64_t n = int64_t{1} << 18, m = 1001, gap = 261, numbers = n - m, negatives = numbers / 2;
  std::vector<V> x(n);
  int64_t i = 0;
  for (int64_t j = 0; j < n; ++j) {
    if (j % gap == 0 && j / gap < m) {
      const bool negative = zeros == 1 || (zeros == 2 && (j / gap) % 2 == 0);
      x[j] = negative ? V(-0.0) : V(0.0);
      continue;
    }
    const int64_t p = (i++ * 40503) % numbers;  // a permutation of 0 .. numbers - 1 (gcd 1)
    x[j] = static_cast<V>(p < negatives ? -(p + 1) : p - negatives + 1);
  }
  return x;
}

}  // namespace dtensor::cuda::testing
