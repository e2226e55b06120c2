// Helpers for the op definition files: each file defines its family's ops in the registry with
// schema, output metadata (validating shapes, with errors naming the call), local kernel and samples.
#pragma once

#include <random>

#include "kernels/cpu/kernels.h"
#include "ops/registry.h"

namespace dtensor::ops {

using kernels::Scalar;

// A sample call for the validator. Tensors are float32 unless given.
Sample sample(std::vector<Shape> shapes, std::vector<ArgValue> positional = {},
              std::vector<std::pair<std::string, ArgValue>> keyword = {},
              std::vector<DType> dtypes = {});
ArgValue T(int index);     // the tensor input `index`
ArgValue V(IValue value);  // a plain value
ArgValue I(int64_t v);
ArgValue L(std::vector<int64_t> v);

// Input data for OpDef::make_input: positive values in [0.25, 2.25]; class indices in [0, upper).
Tensor positive_input(const TensorMeta& m, uint64_t seed);
Tensor index_input(const TensorMeta& m, int64_t upper, uint64_t seed);
// Few distinct values (multiples of 0.5 in [-2, 2]) so that ties are common; with `nans`, about one
// element in eight is NaN (floating dtypes).
Tensor coarse_input(const TensorMeta& m, uint64_t seed, bool nans);
// make_input for an op whose tensor inputs listed in `positive` must be positive.
std::function<Tensor(int, const OpCall&, uint64_t)> positive_inputs(std::vector<int> positive);

// What an op's backward reads: the activations the planner keeps between forward and backward.
enum class Keeps { kInputs, kOutput, kInputsAndOutput, kNothing };
// OpDef::cost of an op of class `cls`.
OpCost cost(CostClass cls, Keeps keeps = Keeps::kInputs);
// OpDef::cost of a matrix product (keeps its inputs): 2 FLOPs per multiply-add, the contraction
// length being the last dim of tensor input `factor`, plus one add per output element when the
// tensor input named `bias` is given.
OpCost contraction_cost(int factor, const char* bias = nullptr);

// OpDef::no_backward of the backward ops autograd calls (gelu_backward, ...).
inline constexpr char kNoDoubleBackward[] = "a backward op (dtensor has no double backward)";

// The common error: "<call>: <what>".
[[noreturn]] void fail(const OpCall& c, const std::string& what);

// Runs f(); a dtensor::Error from it is rethrown prefixed with the call (op, shapes, placements).
template <typename F>
auto guard(const OpCall& c, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const Error& e) {
    fail(c, e.what());
  }
}

// Checks query, key, value of an attention call (tensor inputs qi, qi + 1, qi + 2: [..., L, E],
// [..., S, E], [..., S, Ev], one floating dtype, identical batch dims); returns the output shape
// [..., L, Ev]. Fails naming the call. Shared by SDPA and flex_attention (ops/attention/defs.cc).
Shape attention_shape(const OpCall& c, int qi);

// The norm ops' normalized_shape argument, checked to be non-empty (torch's rule) and to equal the
// trailing dims of tensor input `input`; fails naming the call otherwise (ops/norm/defs.cc).
Shape normalized_shape_arg(const OpCall& c, int input);
// Wraps op.meta so that a call with a complex tensor input or output fails naming the call and the
// dtype, unless op.complex (define_all_ops does it to every op once defined).
void refuse_complex_unless_declared(OpDef& op);
// Runs the definitions, then the distributed steps, of every linked op family (ops/family.h), once
// (thread-safe).
void define_all_ops();

}  // namespace dtensor::ops
