#include "kernels/cpu/random.h"

#include <Random123/philox.h>

#include <cmath>
#include <vector>

#include "dtensor/core/limits.h"

namespace dtensor::kernels {
namespace {

// Significand bits of a floating dtype: a uniform cut to them is exact in it and below 1.
int significand_bits(DType dtype) {
  switch (dtype) {
    case DType::kFloat64: return 53;
    case DType::kFloat32: return 24;
    case DType::kFloat16: return 11;
    case DType::kBFloat16: return 8;
    default: return 0;
  }
}

// [0, 1) from the top `bits` of words w0:w1 (bits <= 53).
double uniform_of(uint32_t w0, uint32_t w1, int bits) {
  const uint64_t x = (static_cast<uint64_t>(w0) << 32) | w1;
  return std::ldexp(static_cast<double>(x >> (64 - bits)), -bits);
}

// significand_bits of a floating dtype, else dtensor::Error naming `op`.
int floating_bits(const char* op, DType dtype) {
  const int bits = significand_bits(dtype);
  DT_CHECK(bits > 0, op, ": dtype ", dtype_name(dtype), " (accepted: float32, float64, bfloat16, float16)");
  return bits;
}

void check_block(const char* op, const Shape& global, const Shape& start, const Shape& shape) {
  DT_CHECK(start.size() == global.size() && shape.size() == global.size(), op, ": block start ",
           shape_str(start), " and shape ", shape_str(shape), " for a tensor of ", shape_str(global),
           " (accepted: the tensor's rank)");
  for (size_t d = 0; d < global.size(); ++d)
    DT_CHECK(start[d] >= 0 && shape[d] >= 0 && global[d] >= 0 && start[d] <= global[d] &&
                 shape[d] <= global[d] - start[d],
             op, ": block ", shape_str(shape), " at ", shape_str(start), " is not inside ", shape_str(global));
  numel(global);  // throws when the element count overflows int64
}

// A float64 tensor of the block's shape with f(words of element g) at each element, in row-major order.
template <typename F>
Tensor draw(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed, uint64_t offset, F f) {
  Tensor out = Tensor::empty(shape, DType::kFloat64);
  const int64_t n = numel(shape);
  if (n == 0) return out;
  double* o = out.data<double>();
  const size_t rank = global.size();
  // Row-major strides of the global tensor, and an odometer over the block.
  std::vector<int64_t> stride(rank, 1);
  for (size_t d = rank; d-- > 1;) stride[d - 1] = stride[d] * global[d];
  std::vector<int64_t> idx(rank, 0);
  int64_t g = 0;
  for (size_t d = 0; d < rank; ++d) g += start[d] * stride[d];
  const int64_t row = rank == 0 ? 1 : shape[rank - 1];
  for (int64_t i = 0; i < n; i += row) {
    for (int64_t j = 0; j < row; ++j) o[i + j] = f(philox_words(seed, offset, static_cast<uint64_t>(g + j)));
    // Next row of the block: carry from the second-to-last dim up.
    for (size_t d = rank == 0 ? 0 : rank - 1; d-- > 0;) {
      g += stride[d];
      if (++idx[d] < shape[d]) break;
      g -= idx[d] * stride[d];
      idx[d] = 0;
    }
  }
  return out;
}

}  // namespace

std::array<uint32_t, 4> philox_words(uint64_t seed, uint64_t offset, uint64_t g) {
  r123::Philox4x32 rng;
  const r123::Philox4x32::ctr_type ctr = {{static_cast<uint32_t>(g), static_cast<uint32_t>(g >> 32),
                                           static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}};
  const r123::Philox4x32::key_type key = {{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)}};
  const r123::Philox4x32::ctr_type r = rng(ctr, key);
  return {r.v[0], r.v[1], r.v[2], r.v[3]};
}

Tensor philox_uniform(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed,
                      uint64_t offset, DType dtype) {
  check_block("philox_uniform", global, start, shape);
  const int bits = floating_bits("philox_uniform", dtype);
  return draw(global, start, shape, seed, offset,
              [bits](const std::array<uint32_t, 4>& w) { return uniform_of(w[0], w[1], bits); })
      .to(dtype);
}

Tensor philox_normal(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed,
                     uint64_t offset, DType dtype) {
  check_block("philox_normal", global, start, shape);
  floating_bits("philox_normal", dtype);
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  return draw(global, start, shape, seed, offset,
              [](const std::array<uint32_t, 4>& w) {
                const double u1 = 1.0 - uniform_of(w[0], w[1], 53);  // (0, 1]: log is finite
                const double u2 = uniform_of(w[2], w[3], 53);
                return std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2);
              })
      .to(dtype);
}

Tensor philox_bernoulli(const Shape& global, const Shape& start, const Shape& shape, uint64_t seed,
                        uint64_t offset, double p, DType dtype) {
  check_block("philox_bernoulli", global, start, shape);
  DT_CHECK(p >= 0 && p <= 1, "philox_bernoulli: p = ", p, " (accepted: a probability in [0, 1])");
  return draw(global, start, shape, seed, offset,
              [p](const std::array<uint32_t, 4>& w) { return uniform_of(w[0], w[1], 53) < p ? 1.0 : 0.0; })
      .to(dtype);
}

}  // namespace dtensor::kernels
