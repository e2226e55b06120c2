// Reductions over a list of dims (empty list = all dims; negative dims count from the end; a dim
// listed twice is an error). keepdim keeps reduced dims as size 1. Floating inputs accumulate in
// double and round to the result dtype; integer/bool inputs accumulate in wrapping int64.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// Sum / product; bool and integer inputs give int64, floating inputs keep their dtype.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor prod(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Floating inputs only (like torch); the mean of nothing is NaN.
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Max / min, keeping the dtype (any dtype); NaN propagates. Reducing a size-0 dim throws.
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance sum((x - mean)^2) / max(0, N - correction) (two-pass), and its square root. Floating
// only.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1,
           bool keepdim = false);
Tensor std(const Tensor& x, const std::vector<int64_t>& dims = {}, double correction = 1,
           bool keepdim = false);
// log(sum(exp(x))) computed stably (shifted by the max); integer/bool inputs give float32.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);

}  // namespace dtensor::kernels
