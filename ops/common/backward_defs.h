// Helpers of the backward-op files (<family>_backward_ops.cc, kernels in kernels/cpu/backward.h
// and the backward kernels of pooling.h, scan.h and selection.h): kernel guards and argument checks
// whose errors name the call. Each gradient has its input's dtype (grad's dtype where the op has no
// input tensor).
//
// Validator data: where one tensor input must agree with another (max-pool indices with `self`,
// cumprod's `output` with `input`, ...), make_input builds the agreeing pair from a fixed seed so
// that each tensor can be made on its own (make_input is called per tensor); the gradient keeps the
// validator's seed.
#pragma once

#include <vector>

#include "ops/common/defs.h"

namespace dtensor::ops {

// The fixed seed of the agreeing validator data above.
inline constexpr uint64_t kBackwardFixedSeed = 0x5eed5eedull;

inline std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

inline int64_t rank_of(const OpCall& c, int t) { return static_cast<int64_t>(c.tensor(t).shape.size()); }

// A kernel that returns zero blocks for a rank whose output blocks are empty or whose block of a
// data input is empty (the CPU kernels reject some empty dims, e.g. pooling's channels), and that
// prefixes kernel errors with the call. `data` lists the inputs whose values the result is made
// of (empty: all); an input read for its shape only (pooling's self) may be empty on a rank that
// still adds gradient to a Partial result.
KernelFn guarded(KernelFn k, std::vector<int> data = {});

// Argument checks that fail with "<call>: <what> ...".
void check_floating(const OpCall& c, int t, const char* what);
void check_index(const OpCall& c, int t, const char* what);  // int64 or int32
void check_shape(const OpCall& c, int t, const char* what, const Shape& want);
// The normalized dim argument `name` against `rank`.
int64_t dim_arg(const OpCall& c, int64_t rank, const char* name = "dim");

}  // namespace dtensor::ops
