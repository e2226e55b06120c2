// Counter-based random draws of any block of a tensor: Philox4x32-10 (Random123, Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11; the generator torch's CUDA RNG uses).
//
// A tensor of shape `global` drawn with (seed, offset) gives the element at global row-major index g
// the four 32-bit words philox4x32_10(counter = {g lo, g hi, offset lo, offset hi}, key = {seed lo,
// seed hi}). Each element depends only on (seed, offset, g), so a block [start, start + shape) of
// the tensor draws exactly the values a whole-tensor draw puts there, on any layout, with no
// communication: what DTensor's random ops need (a Shard holds its slice of one device's draw, a
// Replicate the whole draw on every rank). A caller that draws again advances `offset` (one per
// call is enough: the offset words are separate from the element index).
#pragma once

#include <array>
#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// The four words of element g (exposed for the known-answer tests).
std::array<uint32_t, 4> philox_words(uint64_t seed, uint64_t offset, uint64_t g);

// Uniform values in [0, 1) of the block: word 0 (and word 1 for float64) cut to the dtype's
// significand (24 bits float32, 53 float64, 11 float16, 8 bfloat16), so 1.0 is never drawn.
// global, start and shape have the same rank; start + shape within global (else dtensor::Error
// naming philox_uniform). dtype: floating.
Tensor philox_uniform(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed,
                      uint64_t offset, DType dtype);

// Standard normal values of the block (Box-Muller over words 0-1 and 2-3 in float64, rounded once
// to dtype). Same arguments and errors as philox_uniform.
Tensor philox_normal(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed,
                     uint64_t offset, DType dtype);

// 1 with probability p, else 0 (the float64 uniform of words 0-1 below p), in dtype (any; bool for a
// dropout mask). p in [0, 1], else dtensor::Error naming philox_bernoulli.
Tensor philox_bernoulli(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed,
                        uint64_t offset, double p, DType dtype);

}  // namespace dtensor::kernels
