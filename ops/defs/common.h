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
// [..., L, Ev]. Fails naming the call. Shared by SDPA and flex_attention (attention_ops.cc).
Shape attention_shape(const OpCall& c, int qi);

// Family definers, each defining its ops once.
void define_pointwise_ops(Registry& r);
// The ops of the pointwise tables (ops/pointwise_rows.h), called by define_pointwise_ops.
void define_pointwise_rows(Registry& r);
void define_matrix_ops(Registry& r);
void define_reduction_ops(Registry& r);
void define_norm_ops(Registry& r);
void define_embedding_ops(Registry& r);
void define_view_ops(Registry& r);
void define_loss_ops(Registry& r);
void define_scan_ops(Registry& r);
void define_selection_ops(Registry& r);
void define_pooling_ops(Registry& r);
// The backward ops autograd/ calls (gelu_backward, nll_loss_backward, ...), by family:
// <family>_backward_ops.cc.
void define_pointwise_backward_ops(Registry& r);
void define_norm_backward_ops(Registry& r);
// The norm ops' normalized_shape argument, checked to be non-empty (torch's rule) and to equal the
// trailing dims of tensor input `input`; fails naming the call otherwise (norm_ops.cc).
Shape normalized_shape_arg(const OpCall& c, int input);
void define_embedding_backward_ops(Registry& r);
void define_loss_backward_ops(Registry& r);
void define_view_backward_ops(Registry& r);
void define_pooling_backward_ops(Registry& r);
void define_selection_backward_ops(Registry& r);
void define_scan_backward_ops(Registry& r);
void define_attention_ops(Registry& r);
void define_grouped_mm_ops(Registry& r);
void define_flex_attention_ops(Registry& r);

// Softmax statistics steps on logsumexp, softmax, log_softmax and cross_entropy (softmax_steps.cc).
void add_softmax_steps(Registry& r);

// Every family above, once (thread-safe).
void define_all_ops();

}  // namespace dtensor::ops
