// grouped_mm on CUDA (kernels/cpu/grouped_mm.h for the forms and errors): one cuBLASLt product per
// non-empty group (cuda::mm) written into its rows, columns or slice of a zeroed output; 3-d x 3-d is
// one strided-batched product (cuda::bmm). The offsets are read on the host (a G-element copy):
// group sizes decide the launches, as in torch's per-group fallback.
#include "kernels/cpu/grouped_mm.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using ::dtensor::cuda::DeviceGuard;

Tensor grouped_mm(const Tensor& a, const Tensor& b, const std::optional<Tensor>& offs) {
  detail::check_cuda("grouped_mm", a, "a");
  detail::check_same_device("grouped_mm", a, b, "b");
  const std::string what = grouped_mm_check(a, b, offs);
  const bool a3 = a.dim() == 3, b3 = b.dim() == 3;
  if (a3 && b3) return bmm(a, b);
  DeviceGuard guard(a.device().index);
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  const Tensor host_offs = offs->to(cpu());
  if (!a3 && b3) {
    const int64_t G = b.size(0);
    std::vector<int64_t> ends = grouped_mm_offsets(host_offs, G, M, what);
    Tensor out = zeros({M, N}, a.dtype(), a.device());
    for (int64_t g = 0, s = 0; g < G; s = ends[g++])
      if (ends[g] > s) out.narrow(0, s, ends[g] - s).copy_(mm(a.narrow(0, s, ends[g] - s), b.select(0, g)));
    return out;
  }
  if (!a3 && !b3) {
    const int64_t G = host_offs.dim() == 1 ? host_offs.size(0) : -1;
    std::vector<int64_t> ends = grouped_mm_offsets(host_offs, G, K, what);
    Tensor out = zeros({G, M, N}, a.dtype(), a.device());
    for (int64_t g = 0, s = 0; g < G; s = ends[g++])
      if (ends[g] > s) out.select(0, g).copy_(mm(a.narrow(1, s, ends[g] - s), b.narrow(0, s, ends[g] - s)));
    return out;
  }
  const int64_t G = a.size(0);
  std::vector<int64_t> ends = grouped_mm_offsets(host_offs, G, N, what);
  Tensor out = zeros({M, N}, a.dtype(), a.device());
  for (int64_t g = 0, s = 0; g < G; s = ends[g++])
    if (ends[g] > s) out.narrow(1, s, ends[g] - s).copy_(mm(a.select(0, g), b.narrow(1, s, ends[g] - s)));
  return out;
}

}  // namespace dtensor::kernels::cuda
