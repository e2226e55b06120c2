// Backward formula of flex_attention (through _flex_attention_backward, which takes the forward's
// mask arguments, block_mask included, so the tile map computed once serves both passes).

#include "autograd/backward_util.h"
#include "ops/family.h"

namespace dtensor::bw {

void register_flex_attention_backward(Registry&) {
  def("flex_attention", [](const BackwardCtx& c) {
    std::vector<std::pair<std::string, OpArg>> kw{
        {"is_causal", iv(c.call.get_bool("is_causal"))},      {"window", iv(c.call.get_int("window"))},
        {"prefix_length", iv(c.call.get_int("prefix_length"))}, {"soft_cap", iv(c.call.get_double("soft_cap"))},
        {"block_size", iv(c.call.get_int("block_size"))}};
    if (c.call.has("scale")) kw.emplace_back("scale", iv(c.call.get_double("scale")));
    for (const char* data : {"document_ids", "alibi_slopes", "block_mask"})
      if (int i = c.call.tensor_index(data); i >= 0) kw.emplace_back(data, c.inputs[i]);
    auto g = call_op("_flex_attention_backward", {c.grad(0), c.inputs[0], c.inputs[1], c.inputs[2], c.outputs[0]},
                     kw);
    Grads r{g[0], g[1], g[2]};
    for (int i = 3; i < c.call.num_tensors(); ++i) r.push_back(std::nullopt);  // mask data: no gradient
    return r;
  });
}

DTENSOR_FAMILY_PART("flex_attention", kBackward, register_flex_attention_backward);

}  // namespace dtensor::bw
