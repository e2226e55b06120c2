#include "kernels/cpu/grouped_mm.h"

#include "kernels/cpu/matrix.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {

std::vector<int64_t> grouped_mm_offsets(const Tensor& offs, int64_t groups, int64_t extent,
                                        const std::string& what) {
  DT_CHECK(offs.dtype() == DType::kInt32 && offs.dim() == 1 && offs.size(0) == groups, what,
           ": offs must be int32 [", groups, "] (one cumulative end per group), got ",
           dtype_name(offs.dtype()), " ", shape_str(offs.sizes()));
  std::vector<int64_t> v = offs.to_vector<int64_t>();
  int64_t prev = 0;
  for (size_t g = 0; g < v.size(); ++g) {
    DT_CHECK(v[g] >= prev && v[g] <= extent, what, ": offs[", g, "] = ", v[g],
             " breaks 0 <= offs[0] <= offs[1] <= ... <= ", extent,
             " (offs are the cumulative group ends along the grouped dim)");
    prev = v[g];
  }
  return v;
}

std::string grouped_mm_check(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs) {
  const std::string what = absl::StrCat("grouped_mm(", dtype_name(a.dtype()), " ", shape_str(a.sizes()),
                                        ", ", dtype_name(b.dtype()), " ", shape_str(b.sizes()), ")");
  DT_CHECK(a.dtype() == b.dtype() && is_floating(a.dtype()), what,
           ": operands must share one floating dtype (accepted: float32, float64, bfloat16, float16)");
  DT_CHECK((a.dim() == 2 || a.dim() == 3) && (b.dim() == 2 || b.dim() == 3), what,
           ": operands must be 2-d or 3-d");
  DT_CHECK(a.size(-1) == b.size(-2), what, ": contraction dims differ (", a.size(-1), " vs ", b.size(-2),
           "); accepted: a[..., K] @ b[..., K, N]");
  const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
  DT_CHECK(offs.has_value() != (a3 && b3), what,
           a3 && b3 ? ": 3-d x 3-d takes no offs" : ": offs are required unless both operands are 3-d");
  if (a3 && b3)
    DT_CHECK(a.size(0) == b.size(0), what, ": group counts differ (", a.size(0), " vs ", b.size(0), ")");
  return what;
}

Tensor grouped_mm(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs) {
  DT_KERNEL_ON_DEVICE(grouped_mm, a, b, offs);
  const std::string what = grouped_mm_check(a, b, offs);
  const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
  if (a3 && b3) return bmm(a, b);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  if (!a3 && b3) {  // rows of a grouped
    const int64_t G = b.size(0);
    std::vector<int64_t> ends = grouped_mm_offsets(*offs, G, M, what);
    Tensor out = Tensor::zeros({M, N}, a.dtype());
    for (int64_t g = 0, s = 0; g < G; s = ends[g++])
      if (ends[g] > s) out.narrow(0, s, ends[g] - s).copy_(mm(a.narrow(0, s, ends[g] - s), b.select(0, g)));
    return out;
  }
  if (!a3 && !b3) {  // contraction dim grouped: one [M, N] product per group
    const int64_t G = offs->dim() == 1 ? offs->size(0) : -1;
    std::vector<int64_t> ends = grouped_mm_offsets(*offs, G, K, what);
    Tensor out = Tensor::zeros({G, M, N}, a.dtype());
    for (int64_t g = 0, s = 0; g < G; s = ends[g++])
      if (ends[g] > s) out.select(0, g).copy_(mm(a.narrow(1, s, ends[g] - s), b.narrow(0, s, ends[g] - s)));
    return out;
  }
  // a 3-d, b 2-d: columns of b grouped
  const int64_t G = a.size(0);
  std::vector<int64_t> ends = grouped_mm_offsets(*offs, G, N, what);
  Tensor out = Tensor::zeros({M, N}, a.dtype());
  for (int64_t g = 0, s = 0; g < G; s = ends[g++])
    if (ends[g] > s) out.narrow(1, s, ends[g] - s).copy_(mm(a.select(0, g), b.narrow(1, s, ends[g] - s)));
  return out;
}

}  // namespace dtensor::kernels
