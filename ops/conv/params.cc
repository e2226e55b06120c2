#include "ops/conv/params.h"

#include "absl/strings/str_cat.h"
#include "ops/common/defs.h"

namespace dtensor::ops {

kernels::ConvParams conv_params(const OpCall& c, int x_index, int w_index) {
  const Shape& x = c.tensor(x_index).shape;
  const Shape& w = c.tensor(w_index).shape;
  if (c.get_bool("transposed"))
    fail(c, "transposed convolution is not supported yet; accepted: transposed=False");
  if (x.size() < 3 || x.size() > 5 || w.size() != x.size())
    fail(c, "accepted: input[N, C, *spatial] with 1 to 3 spatial dims and weight[O, C/groups, *kernel] of the same rank");
  const size_t sd = x.size() - 2;
  kernels::ConvParams p;
  p.groups = c.get_int("groups");
  // Values at most kMaxConvParam keep the output-size arithmetic inside int64 (sizes are bounded by
  // kMaxTensorBytes < 2^47): stride and dilation >= 1, padding >= 0, as ATen requires.
  constexpr int64_t kMaxConvParam = int64_t{1} << 14;
  auto expand = [&](const char* name, int64_t dflt, int64_t lo) {
    std::vector<int64_t> v = c.get_int_list(name, {dflt});
    if (v.size() == 1) v.assign(sd, v[0]);
    if (v.size() != sd) fail(c, absl::StrCat(name, " needs ", sd, " values (or one for all)"));
    for (int64_t e : v)
      if (e < lo || e > kMaxConvParam) fail(c, absl::StrCat(name, " value ", e, " is outside [", lo, ", ", kMaxConvParam, "]"));
    return v;
  };
  p.stride = expand("stride", 1, 1);
  p.padding = expand("padding", 0, 0);
  p.dilation = expand("dilation", 1, 1);
  return p;
}

Shape conv_output_shape(const OpCall& c, int x_index, int w_index) {
  const kernels::ConvParams p = conv_params(c, x_index, w_index);
  // The kernel's own checks (groups against the channels, a kernel that fits), naming the call.
  return guard(c, [&] { return kernels::conv_output_shape(c.tensor(x_index).shape, c.tensor(w_index).shape, p); });
}

}  // namespace dtensor::ops
