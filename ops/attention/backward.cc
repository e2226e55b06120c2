// Backward formula of scaled_dot_product_attention (through _scaled_dot_product_attention_backward).

#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_attention_backward(Registry&) {
  def("scaled_dot_product_attention", [](const BackwardCtx& c) {
    std::vector<std::pair<std::string, OpArg>> kw{{"is_causal", iv(c.call.get_bool("is_causal"))}};
    if (c.call.has("scale")) kw.emplace_back("scale", iv(c.call.get_double("scale")));
    const int mask = c.call.tensor_index("attn_mask");
    if (mask >= 0) kw.emplace_back("attn_mask", c.inputs[mask]);
    auto g = call_op("_scaled_dot_product_attention_backward",
                     {c.grad(0), c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0]}, kw);
    Grads r{g[0], g[1], g[2]};
    if (mask >= 0) r.push_back(std::nullopt);  // masks get no gradient
    return r;
  });
}

DTENSOR_FAMILY_PART("attention", kBackward, register_attention_backward);

}  // namespace dtensor::bw
