// im2col and col2im (nn.Unfold and nn.Fold; ATen's im2col and col2im, 2 spatial dims): the sliding
// blocks of an image as columns, and the sum of columns back into an image. With out_h = (H + 2 p_h
// - d_h (k_h - 1) - 1) / s_h + 1 (likewise out_w) and L = out_h out_w, column row c k_h k_w + i k_w
// + j at column oh out_w + ow holds image element (c, oh s_h - p_h + i d_h, ow s_w - p_w + j d_w),
// zero where that lies in the padding. Floating dtypes; sums in double in a fixed order. Host
// kernels (a device tensor runs on a host copy: DT_KERNEL_HOST_ONLY).
#pragma once

#include <array>
#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

struct FoldParams {
  std::array<int64_t, 2> kernel, dilation, padding, stride;
};

// The number of sliding blocks along each spatial dim of an [H, W] image; throws dtensor::Error
// naming `op` when a parameter is out of range (kernel, dilation, stride >= 1, padding >= 0) or no
// block fits.
std::array<int64_t, 2> fold_blocks(const char* op, int64_t h, int64_t w, const FoldParams& p);

// x [N, C, H, W] or [C, H, W] -> [N, C k_h k_w, L] (or [C k_h k_w, L]), x's dtype.
Tensor im2col(const Tensor& x, const FoldParams& p);

// cols [N, C k_h k_w, L] or [C k_h k_w, L] -> [N, C, H, W] (or [C, H, W]) with (H, W) = output_size:
// overlapping blocks add up. With first_block >= 0, cols holds only the blocks [first_block,
// first_block + cols.size(-1)) of the block grid (a shard of L) and the image gets their sum alone.
// Throws dtensor::Error when dim -2 is not a multiple of k_h k_w or the blocks do not fit the block
// count of output_size (all of it when first_block < 0).
Tensor col2im(const Tensor& cols, std::array<int64_t, 2> output_size, const FoldParams& p,
              int64_t first_block = -1);

}  // namespace dtensor::kernels
