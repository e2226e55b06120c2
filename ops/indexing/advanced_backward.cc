// Gradients of advanced indexing (torch's derivatives.yaml): index(self, indices) gives self
// index_put(zeros, indices, grad, accumulate=True) (a repeated index collects every use);
// index_put(self, indices, values, accumulate) gives self grad (accumulate) or grad with the
// written positions zeroed (index_put of zeros), and values index(grad, indices) summed over the
// dims values was broadcast along. Index tensors have none.
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

// The call's indices as an OpArg: the index DTensors in dim order, an undefined DTensor for None.
OpArg indices_of(const BackwardCtx& c) {
  std::vector<DTensor> out;
  for (int t : c.call.tensor_list("indices")) out.push_back(t < 0 ? DTensor() : c.inputs[t]);
  return out;
}

void register_advanced_indexing_backward(Registry&) {
  def("index.Tensor", [](const BackwardCtx& c) {
    Grads g(c.inputs.size());  // the index tensors' stay empty
    g[0] = call_op1("index_put", {full_like(c.inputs[0], 0.0), indices_of(c), c.grad(0)}, {{"accumulate", iv(true)}});
    return g;
  });
  def("index_put", [](const BackwardCtx& c) {
    Grads g(c.inputs.size());
    const DTensor& values = c.inputs.back();
    if (c.needs[0])
      g[0] = c.call.get_bool("accumulate")
                 ? c.grad(0)
                 : call_op1("index_put", {c.grad(0), indices_of(c), full_like(values, 0.0)});
    if (c.needs.back()) g.back() = sum_to(call_op1("index.Tensor", {c.grad(0), indices_of(c)}), values.shape());
    return g;
  });
}

}  // namespace

DTENSOR_FAMILY_PART("indexing", kBackward, register_advanced_indexing_backward);

}  // namespace dtensor::bw
