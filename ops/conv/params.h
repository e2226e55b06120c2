// The parameters both convolution ops take (ATen's: stride, padding, dilation per spatial dim or one
// value for all, groups; transposed and output_padding), read and checked once for both.
#pragma once

#include "kernels/cpu/conv.h"
#include "ops/registry.h"

namespace dtensor::ops {

// Checks input [N, C, *spatial] (tensor `x`) against weight [O, C / groups, *kernel] (tensor `w`)
// and the parameters, failing with the call named; returns them with one value per spatial dim.
kernels::ConvParams conv_params(const OpCall& c, int x, int w);
// The output shape [N, O, *out] of that convolution.
Shape conv_output_shape(const OpCall& c, int x, int w);

}  // namespace dtensor::ops
