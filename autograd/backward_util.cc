#include "autograd/backward_util.h"

#include <algorithm>
#include <mutex>

#include "ops/family.h"

namespace dtensor {

namespace bw {

void def(const std::string& name, BackwardFn fn, std::source_location where) {
  OpDef& op = Registry::get().mutable_find(name, where);
  DT_CHECK(!op.backward, "autograd: ", where.file_name(), ":", where.line(), " registers a second backward for op '",
           name, "'");
  op.backward = std::make_shared<const BackwardDef>(BackwardDef{std::move(fn)});
}

IValue iv(int64_t v) { return IValue(v); }
IValue iv(double v) { return IValue(v); }
IValue iv(bool v) { return IValue(v); }
IValue iv(std::vector<int64_t> v) { return IValue(std::move(v)); }
IValue iv(const std::string& v) { return IValue(v); }

DTensor full_like(const DTensor& t, double value) {
  return distribute_tensor(Tensor::full(t.shape(), value, t.dtype(), t.local_tensor().device()), t.mesh(),
                           Placements(t.placements().size(), Replicate()));
}

DTensor as_float(const DTensor& mask, DType dtype) { return F::to(mask, dtype); }

DTensor sum_to(const DTensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  DTensor s = dims.empty() ? g : F::sum(g, dims, true);
  return F::reshape(s, std::vector<int64_t>(shape.begin(), shape.end()));
}

std::vector<int64_t> reduced_dims(const OpCall& c, int64_t rank) {
  std::vector<int64_t> dims = c.has("dim") ? c.get_int_list("dim") : std::vector<int64_t>{};
  if (dims.empty())
    for (int64_t d = 0; d < rank; ++d) dims.push_back(d);
  for (auto& d : dims) d = wrap_dim(d, rank, "dim");
  std::sort(dims.begin(), dims.end());
  return dims;
}

DTensor unreduce(const DTensor& g, const Shape& shape, std::vector<int64_t> dims, bool keepdim) {
  DTensor x = g;
  if (!keepdim)
    for (int64_t d : dims) x = F::unsqueeze(x, d);  // ascending: each insert lands at its final dim
  return F::expand(x, std::vector<int64_t>(shape.begin(), shape.end()));
}

}  // namespace bw

void init_autograd() {
  static std::once_flag once;
  std::call_once(once, [] {
    init_ops();
    ops::run_family_parts(ops::FamilyPart::kBackward, Registry::get());
  });
}

}  // namespace dtensor
