// Direct convolution over 1 to 3 spatial dims: ATen's convolution with transposed = False (deep
// learning's cross-correlation, with groups, stride, zero padding and dilation), and its gradients.
// Floating dtypes; every sum accumulates in double, in a fixed order. Host kernels (a device tensor
// runs on a host copy: DT_KERNEL_HOST_ONLY).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

struct ConvParams {
  std::vector<int64_t> stride, padding, dilation;  // one per spatial dim
  int64_t groups = 1;
};

// The output's spatial size along one dim: (in + 2 padding - dilation (kernel - 1) - 1) / stride + 1.
int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation);

// The shape [N, O, *out] convolution(x, w, ., p) returns, for input and weight shapes x and w;
// throws dtensor::Error as convolution does for ranks, channels, parameters or a kernel that do not
// fit (the convolution ops' metadata calls it, so the checks are written once).
Shape conv_output_shape(const Shape& x, const Shape& w, const ConvParams& p);

// x [N, C, *spatial], w [O, C / groups, *kernel], bias [O] (undefined: none) -> [N, O, *out] of x's
// dtype. Throws dtensor::Error for ranks, channels, parameters or a kernel that do not fit.
Tensor convolution(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p);

// The gradients of convolution(x, w, bias) given grad [N, O, *out]: grad_input (x's shape),
// grad_weight (w's shape), grad_bias [O], in that order; an output whose `mask` entry is false is
// undefined.
std::vector<Tensor> convolution_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                                           const ConvParams& p, std::array<bool, 3> mask);

}  // namespace dtensor::kernels
