// The parameters both convolution ops take (ATen's: stride, padding, dilation per spatial dim or one
// value for all, groups; transposed and output_padding), read and checked once for both.
#pragma once

#include "kernels/cpu/conv.h"
#include "ops/registry.h"

namespace dtensor::ops {

// The parameters with one value per spatial dim, after checking transposed = False, the ranks of
// input [N, C, *spatial] (tensor `x`) and weight [O, C / groups, *kernel] (tensor `w`) and each
// value's range; fails with the call named.
kernels::ConvParams conv_params(const OpCall& c, int x, int w);
// The output shape [N, O, *out] of that convolution, with kernels::conv_output_shape's checks
// (channels against groups, a kernel that fits the padded input) failing with the call named.
Shape conv_output_shape(const OpCall& c, int x, int w);

}  // namespace dtensor::ops
