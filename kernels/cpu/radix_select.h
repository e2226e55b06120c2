// Local helpers of the distributed radix select (ops/selection/steps.cc): median, nanmedian
// and kthvalue over a sharded dim. Every number of a dtype maps to an unsigned key whose integer
// order is the numbers' order (kthvalue's order of kernels/cpu/selection.h); the k-th smallest key
// is found digit by digit, most significant first, from per-row histograms that ranks sum with one
// all-reduce a digit.
//
// Keys (the classic radix-sort mapping of IEEE 754 bits): a float with the sign bit clear gets the
// sign bit set, one with it set gets every bit inverted, so that keys of negatives count down from
// -0 and keys of positives count up from +0. -0.0 takes the key of +0.0 (they compare equal, and
// equal values must share a key for ties to resolve by index). Integers: the two's-complement bits
// with the sign bit inverted. Bool: 0 / 1. NaN has no key; histograms count it apart.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// Key width in bits of dtype t: 8 (bool), 16 (bfloat16, float16), 32 (float32, int32), 64 (float64,
// int64).
int radix_key_bits(DType t);

// The number of dtype t whose key is `key` (float64 value; int64 value too for integer dtypes).
// `key` must be a key of a number (< 2^radix_key_bits(t)).
struct RadixValue {
  double f = 0;
  int64_t i = 0;
};
RadixValue radix_decode(uint64_t key, DType t);

// Per row of x along dim (the rows in the row-major order of x's other dims; a 0-d x is one row of
// one element), the counts of one digit of the keys. The digit is bits [shift, shift + bits) of the
// key (0 <= shift, 1 <= bits <= 16, shift + bits <= radix_key_bits(x.dtype())); an element counts
// when its key's bits above the digit equal the row's prefix[row] (always when shift + bits is the
// key width). Returns int64 [rows, 2^bits + 1]: column j counts the matching numbers whose digit is
// j; the last column counts the row's NaNs, whatever the prefix (0 for integer dtypes).
// Throws if prefix.size() != rows or the digit does not fit the key.
Tensor radix_histogram(const Tensor& x, int64_t dim, const std::vector<uint64_t>& prefix, int shift,
                       int bits);

}  // namespace dtensor::kernels
