#include "ops/common/backward_defs.h"

#include <algorithm>

namespace dtensor::ops {
namespace {

// Zero blocks of every output: what a rank computes when a sharded input block of it is empty
// (its outputs are then empty too, or Partial pieces whose identity is 0).
std::vector<Tensor> zero_outputs(const LocalContext& ctx) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < ctx.out_meta.size(); ++i)
    out.push_back(Tensor::zeros(ctx.out_block(static_cast<int>(i)).first, ctx.out_meta[i].dtype));
  return out;
}

}  // namespace

KernelFn guarded(KernelFn k, std::vector<int> data) {
  return [k, data](const std::vector<Tensor>& in, const OpCall& c, const LocalContext& ctx) {
    if (!ctx.single_device()) {
      bool empty = false;
      for (size_t i = 0; i < ctx.out_meta.size(); ++i) empty |= numel(ctx.out_block(static_cast<int>(i)).first) == 0;
      for (size_t t = 0; t < in.size(); ++t)
        if (data.empty() || std::find(data.begin(), data.end(), static_cast<int>(t)) != data.end())
          empty |= in[t].numel() == 0;
      if (empty) return zero_outputs(ctx);
    }
    return guard(c, [&] { return k(in, c, ctx); });
  };
}

void check_floating(const OpCall& c, int t, const char* what) {
  if (!is_floating(c.tensor(t).dtype))
    fail(c, absl::StrCat(what, " must be floating, got ", dtype_name(c.tensor(t).dtype)));
}

void check_index(const OpCall& c, int t, const char* what) {
  DType d = c.tensor(t).dtype;
  if (d != DType::kInt64 && d != DType::kInt32)
    fail(c, absl::StrCat(what, " must be int64 or int32, got ", dtype_name(d)));
}

void check_shape(const OpCall& c, int t, const char* what, const Shape& want) {
  if (c.tensor(t).shape != want)
    fail(c, absl::StrCat(what, " has shape ", shape_str(c.tensor(t).shape), ", accepted: ",
                         shape_str(want)));
}

int64_t dim_arg(const OpCall& c, int64_t rank, const char* name) {
  return guard(c, [&] { return wrap_dim(c.get_int(name), rank, name); });
}

}  // namespace dtensor::ops
