#pragma once

// The argument shapes every CPU attention kernel takes (scaled_dot_product_attention, its backward,
// flex_attention): query [..., L, E], key [..., S, E], value [..., S, Ev] of one rank >= 2,
// identical batch dims (no broadcasting), one floating dtype. One check, one message, for all of
// them.

#include <cstdint>
#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels::detail {

struct AttentionShapes {
  Shape batch;                                 // the shared batch dims
  int64_t B = 1, L = 0, S = 0, E = 0, Ev = 0;  // B: their product
  DType dtype = DType::kFloat32;               // of query, key and value
  DType compute = DType::kFloat32;             // float or double (compute_dtype)
};

// "query float32 [2, 4, 8], key ..., value ...": for the errors of the kernels that take them.
std::string attention_shapes_str(const Tensor& q, const Tensor& k, const Tensor& v);

// The shapes of q, k, v; throws DTensorError naming `op`, the three shapes and dtypes, and what is
// accepted when they are not as above.
AttentionShapes check_attention_shapes(const char* op, const Tensor& q, const Tensor& k,
                                       const Tensor& v);

}  // namespace dtensor::kernels::detail
