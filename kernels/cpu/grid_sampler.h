// grid_sampler_2d (torch.nn.functional.grid_sample on 4-d input) and its backward, with ATen's
// semantics (aten/src/ATen/native/GridSampler.h; where a grid value is far outside [-1, 1] or NaN,
// as its CPU kernel aten/src/ATen/native/cpu/GridSamplerKernel.cpp computes it):
//   input [N, C, H, W], grid [N, Ho, Wo, 2] (x then y, normalized to [-1, 1]) -> [N, C, Ho, Wo].
// A grid value g is unnormalized to a pixel coordinate along a dim of size s as
//   align_corners: (g + 1) / 2 (s - 1)      otherwise: ((g + 1) s - 1) / 2,
// then, for padding_mode border, clipped to [0, s - 1]; for reflection, reflected about the pixel
// centers 0 and s - 1 (align_corners) or the edges -0.5 and s - 0.5, then clipped. Interpolation:
//   0 bilinear: the 4 neighbours weighted by (1 - t) or t per dim; a neighbour outside is 0.
//   1 nearest:  the pixel at nearbyint (round half to even) of the coordinate; outside is 0.
//   2 bicubic:  the 4 x 4 neighbours with Keys' cubic convolution weights, A = -0.75; the
//               coordinate is only unnormalized, and each neighbour's index is padded (clipped or
//               reflected) on its own, as ATen's get_value_bounded does.
// Floating dtypes; computed in float for float32 / 16-bit floats and in double for float64, as
// ATen's scalar_t. Host kernels (a device tensor runs on a host copy: DT_KERNEL_HOST_ONLY).
#pragma once

#include <cstdint>
#include <utility>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// Throws dtensor::Error naming grid_sampler_2d when the shapes disagree (input 4-d with non-empty
// H, W; grid [N, Ho, Wo, 2] with input's N), the dtypes differ or are not floating, or a mode is
// out of range (interpolation 0..2, padding 0..2).
void check_grid_sampler_2d(const Shape& input, DType input_dtype, const Shape& grid, DType grid_dtype,
                           int64_t interpolation_mode, int64_t padding_mode);

// The sampled output [N, C, Ho, Wo], input's dtype.
Tensor grid_sampler_2d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                       bool align_corners);

// (grad_input like input, grad_grid like grid) for grad_output [N, C, Ho, Wo]: grad_input adds each
// output's gradient times its interpolation weight into the pixels it read (the same padding of
// indices), grad_grid is the derivative through the weights and the coordinate mapping (zero for
// nearest, and where the clip of border / reflection padding is flat, as ATen's
// clip_coordinates_set_grad). Throws as check_grid_sampler_2d, and when grad_output is not
// [N, C, Ho, Wo].
std::pair<Tensor, Tensor> grid_sampler_2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                                                   int64_t interpolation_mode, int64_t padding_mode,
                                                   bool align_corners);

}  // namespace dtensor::kernels
