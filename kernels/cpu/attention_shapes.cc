#include "kernels/cpu/attention_shapes.h"

#include "absl/strings/str_cat.h"
#include "kernels/cpu/loops.h"

namespace dtensor::kernels::detail {

std::string attention_shapes_str(const Tensor& q, const Tensor& k, const Tensor& v) {
  return absl::StrCat("query ", dtype_name(q.dtype()), " ", shape_str(q.sizes()), ", key ",
                      dtype_name(k.dtype()), " ", shape_str(k.sizes()), ", value ",
                      dtype_name(v.dtype()), " ", shape_str(v.sizes()));
}

AttentionShapes check_attention_shapes(const char* op, const Tensor& q, const Tensor& k,
                                       const Tensor& v) {
  DT_CHECK(q.dim() >= 2 && k.dim() == q.dim() && v.dim() == q.dim(), op, ": ",
           attention_shapes_str(q, k, v),
           " (accepted: query [..., L, E], key [..., S, E], value [..., S, Ev] of one rank >= 2)");
  AttentionShapes s;
  s.batch = Shape(q.sizes().begin(), q.sizes().end() - 2);
  for (const Tensor* t : {&k, &v})
    DT_CHECK(Shape(t->sizes().begin(), t->sizes().end() - 2) == s.batch, op, ": ",
             attention_shapes_str(q, k, v),
             ": batch dims differ (accepted: identical batch dims, no broadcasting)");
  s.B = numel(s.batch);
  s.L = q.size(-2);
  s.E = q.size(-1);
  s.S = k.size(-2);
  s.Ev = v.size(-1);
  DT_CHECK(k.size(-1) == s.E && v.size(-2) == s.S, op, ": ", attention_shapes_str(q, k, v),
           " (accepted: key [..., S, E] with query's E, value [..., S, Ev] with key's S)");
  DT_CHECK(is_floating(q.dtype()) && k.dtype() == q.dtype() && v.dtype() == q.dtype(), op, ": ",
           attention_shapes_str(q, k, v), " (accepted: one floating dtype)");
  s.dtype = q.dtype();
  s.compute = compute_dtype(s.dtype);
  return s;
}

}  // namespace dtensor::kernels::detail
