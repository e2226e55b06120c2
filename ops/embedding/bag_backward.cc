// Backward of _embedding_bag, composed of registered ops (index_select, index_add, scatter_add): the
// gradient of output row b reaches every non-padding index of bag b (scaled by its per-sample weight
// for sum, divided by the bag's size for mean) and, for max, only the row that held each maximum
// (none for an empty bag); per_sample_weights get grad[bag] . weight[index]. scale_grad_by_freq is
// refused (ATen divides by each index's count in the batch; dtensor does not).
#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {
namespace {

DTensor as_column(const DTensor& v, DType dt) { return F::reshape(F::to(v, dt), {v.shape()[0], 1}); }

void register_embedding_bag_backward(Registry&) {
  def("_embedding_bag", [](const BackwardCtx& c) {
    DT_CHECK(!c.call.get_bool("scale_grad_by_freq"), c.call.str(),
             ": the gradient with scale_grad_by_freq=True; accepted: scale_grad_by_freq=False");
    const DTensor& w = c.inputs[0];
    const DTensor& indices = c.inputs[1];
    const DType dt = w.dtype();
    const int64_t mode = c.call.get_int("mode"), pad = c.call.get_int("padding_idx");
    const int psw = c.call.tensor_index("per_sample_weights");
    const DTensor g = c.grad(0);
    // ATen's fast path for sum returns no offset2bag: take it from the same bags summed by mean,
    // which always returns it.
    const DTensor offset2bag = c.outputs[1].shape() == indices.shape() ? c.outputs[1] : call_op(
        "_embedding_bag", {w, indices, c.inputs[2], iv(false), iv(int64_t{1}), iv(false), IValue(),
                           c.call.value("include_last_offset"), c.call.value("padding_idx")})[1];
    const DTensor& bag_size = c.outputs[2];
    Grads r(c.inputs.size());
    const DTensor zeros = full_like(w, 0.0);
    if (mode == 2) {
      // Empty bags' max_indices are 0: their gradient must not land on row 0.
      const DTensor filled = as_column(call_op1("gt", {bag_size, full_like(bag_size, 0.0)}), dt);
      if (c.needs[0])
        r[0] = call_op1("scatter_add", {zeros, iv(int64_t{0}), c.outputs[3], F::mul(g, filled)});
      return r;
    }
    const DTensor per_index = call_op1("index_select", {g, iv(int64_t{0}), offset2bag});  // [n, D]
    DTensor scale = as_column(call_op1("ne", {indices, full_like(indices, static_cast<double>(pad))}), dt);
    if (pad < 0) scale = full_like(scale, 1.0);
    if (c.needs[0]) {
      DTensor s = scale;
      if (psw >= 0) s = F::mul(s, as_column(c.inputs[psw], dt));
      if (mode == 1) {
        const DTensor size = F::to(bag_size, dt);
        const DTensor per_bag = F::maximum(size, full_like(size, 1.0));
        s = F::div(s, as_column(call_op1("index_select", {per_bag, iv(int64_t{0}), offset2bag}), dt));
      }
      r[0] = call_op1("index_add", {zeros, iv(int64_t{0}), indices, F::mul(per_index, s)});
    }
    if (psw >= 0 && c.needs[psw]) {
      const DTensor rows = call_op1("index_select", {w, iv(int64_t{0}), indices});
      r[psw] = F::reshape(F::mul(F::sum(F::mul(per_index, rows), {1}, true), scale), {indices.shape()[0]});
    }
    return r;
  });
}

}  // namespace

DTENSOR_FAMILY_PART("embedding", kBackward, register_embedding_bag_backward);

}  // namespace dtensor::bw
