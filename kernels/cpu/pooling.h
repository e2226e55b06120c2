// Average / max / adaptive-average pooling over the trailing `dims` (1, 2 or 3) spatial dims of a
// floating [N, C, *spatial] or [C, *spatial] tensor, forward and backward, torch's single-device
// CPU semantics. Computed in double, results rounded to the input (forward) or grad (backward)
// dtype; results are contiguous. Max-pool indices are int64.
//
// Parameters are given per spatial dim (for 2-d: {H, W} order); a single value broadcasts to every
// spatial dim. An empty stride means stride = kernel_size; an empty padding means 0, an empty
// dilation 1. Checks, as torch: kernel, stride, dilation > 0; 0 <= padding <= effective_kernel / 2
// with effective_kernel = (kernel - 1) * dilation + 1 (3-d pooling checks padding <= kernel / 2,
// like torch's pool3d check); C and the spatial sizes non-zero (N may be 0); every output size
// >= 1; avg_pool with dims = 3 also needs every spatial size >= kernel_size (torch's avg_pool3d
// check); divisor_override != 0.
//
// Output size per dim (pool_output_size, torch's pooling_output_shape):
//   out = floor((in + 2 * pad - dilation * (kernel - 1) - 1 + (ceil_mode ? stride - 1 : 0)) /
//   stride) + 1 and with ceil_mode, when (out - 1) * stride >= in + pad the last window would start
//   inside the right padding, so it is dropped (out -= 1): the last window starts inside the input
//   or the left padding.
// Window of output o along a dim: positions o * stride - pad + j * dilation, j = 0 .. kernel - 1;
// positions outside [0, in) are padding (never read).
//
// avg_pool (dilation 1): sum of the window's in-input elements / divisor, where
//   divisor = divisor_override when given; else with count_include_pad the product over dims of
//   min(start + kernel, in + pad) - start (start = o * stride - pad): the padding counts but the
//   part of a ceil_mode window beyond the right padding does not; else the number of in-input
//   elements. A window without in-input elements gives 0 (cannot happen under the checks above).
// max_pool_with_indices: the window is scanned in row-major order (d, h, w ascending) starting
//   from (-inf, index of the first in-input position); an element replaces the running max when
//   x > max or x is NaN. So NaN counts as the maximum, among equal values the FIRST index wins, and
//   among several NaNs the LAST one wins (the predicate of ATen's CPU max-pool kernel). Indices are
//   flat over each (n, c) plane's spatial extent: w (1-d), h * W + w (2-d), (d * H + h) * W + w
//   (3-d).
// adaptive_avg_pool (1, 2 or 3 spatial dims): output (i, j) averages rows [floor(i * H / OH),
//   ceil((i + 1) * H / OH)) and likewise along every spatial dim (ATen's start_index/end_index);
//   output_size entries >= 0 (one value broadcasts).
// Backward: avg: each output's grad / divisor is added to its window's in-input elements; max: the
//   grad is added at its index (overlapping windows accumulate); adaptive: grad / window size.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// A slab of one spatial dim, for pooling a sharded spatial dim after a halo exchange.
// The input holds the global (unpadded) rows [input_start, input_start + its size) of a spatial
// dim whose global size is input_size, and the op produces the global output rows
// [output_start, output_end). All window arithmetic -- padding, ceil_mode, count_include_pad,
// divisors, max indices -- is done in global coordinates, so the result equals those output rows
// of the op on the whole input, and max-pool indices are global. Padding is never materialized:
// global rows < 0 or >= input_size are padding, so only in-input halo rows need exchanging. The
// slab must contain every in-input row that the produced windows read (pool_input_range /
// adaptive_pool_input_range give the range); otherwise the op throws naming the needed rows.
// Several slabs (on distinct dims) may be given; dims without one are whole.
// Backward with slabs: avg_pool_backward / adaptive_avg_pool_backward take the grad of the
// produced output rows and return the gradient w.r.t. the slab -- halo rows receive partial sums
// that the caller sends back to their owners and adds; max_pool_backward scatters the global
// indices into the slab (an index outside the slab throws).
struct PoolSlab {
  int dim = 0;               // spatial dim, 0 .. dims - 1 (2-d: 0 = H, 1 = W)
  int64_t input_size = 0;    // global size of that dim
  int64_t input_start = 0;   // global row of the slab's first row
  int64_t output_start = 0;  // first global output row to produce
  int64_t output_end = 0;    // one past the last (unused by max_pool_backward)
  // Global output size of the dim: needed by adaptive_avg_pool_backward (its grad holds only the
  // slab's rows); elsewhere derived from the parameters, and checked when >= 0.
  int64_t output_size = -1;
};

// Output spatial sizes (see above); input_spatial has one entry per spatial dim. Checks the
// parameters (not that the sizes are >= 1).
std::vector<int64_t> pool_output_size(const Shape& input_spatial,
                                      const std::vector<int64_t>& kernel_size,
                                      const std::vector<int64_t>& stride,
                                      const std::vector<int64_t>& padding,
                                      const std::vector<int64_t>& dilation, bool ceil_mode);
// The global input rows [lo, hi) read by output rows [out_start, out_end) of one dim (clamped to
// the input; lo == hi when none). Exact for dilation 1, a covering range otherwise.
std::pair<int64_t, int64_t> pool_input_range(int64_t out_start, int64_t out_end, int64_t input_size,
                                             int64_t kernel, int64_t stride, int64_t padding,
                                             int64_t dilation = 1);
std::pair<int64_t, int64_t> adaptive_pool_input_range(int64_t out_start, int64_t out_end,
                                                      int64_t input_size, int64_t output_size);

Tensor avg_pool(const Tensor& x, int dims, std::vector<int64_t> kernel_size,
                std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
                bool count_include_pad, std::optional<int64_t> divisor_override,
                const std::vector<PoolSlab>& slabs = {});
// grad_out has the forward output's shape; x supplies the input shape.
Tensor avg_pool_backward(const Tensor& grad_out, const Tensor& x, int dims,
                         std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                         std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override,
                         const std::vector<PoolSlab>& slabs = {});
// (values, int64 indices).
std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& x, int dims,
                                                std::vector<int64_t> kernel_size,
                                                std::vector<int64_t> stride,
                                                std::vector<int64_t> padding,
                                                std::vector<int64_t> dilation, bool ceil_mode,
                                                const std::vector<PoolSlab>& slabs = {});
// grad_out and indices have the forward output's shape; the result has input_shape.
Tensor max_pool_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape,
                         int dims, const std::vector<PoolSlab>& slabs = {});
// x: [N, C, spatial...] or [C, spatial...] with `dims` (1 to 3) spatial dims; output_size one
// value per spatial dim (global sizes when slabs are given). Errors name the op as ATen does
// (adaptive_avg_pool<dims>d).
Tensor adaptive_avg_pool(const Tensor& x, int dims, std::vector<int64_t> output_size,
                         const std::vector<PoolSlab>& slabs = {});
Tensor adaptive_avg_pool_backward(const Tensor& grad_out, const Shape& input_shape, int dims,
                                  const std::vector<PoolSlab>& slabs = {});

}  // namespace dtensor::kernels
