#include "kernels/cpu/embedding_bag.h"

#include <limits>
#include <vector>

#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {

bool embedding_bag_offset2bag_is_empty(DType weight, int64_t mode, int64_t padding_idx) {
  return mode == 0 && padding_idx < 0 &&
         (weight == DType::kFloat32 || weight == DType::kFloat16 || weight == DType::kBFloat16);
}

std::array<Tensor, 4> embedding_bag(const Tensor& weight, const Tensor& indices, const Tensor& offsets,
                                    int64_t mode, const Tensor& per_sample_weights, bool include_last_offset,
                                    int64_t padding_idx, int64_t num_weights, int64_t row_start, int64_t row_end) {
  DT_KERNEL_HOST_ONLY(embedding_bag, weight, indices, offsets, mode, per_sample_weights, include_last_offset,
                      padding_idx, num_weights, row_start, row_end);
  DT_CHECK(weight.dim() == 2 && indices.dim() == 1 && offsets.dim() == 1, "_embedding_bag: weight ",
           shape_str(weight.sizes()), ", indices ", shape_str(indices.sizes()), ", offsets ",
           shape_str(offsets.sizes()), "; accepted: weight [V, D], 1-d indices and offsets");
  DT_CHECK(mode >= 0 && mode <= 2, "_embedding_bag: mode ", mode, "; accepted: 0 (sum), 1 (mean), 2 (max)");
  DT_CHECK(row_start >= 0 && row_end - row_start == weight.size(0) && row_end <= num_weights,
           "_embedding_bag: rows [", row_start, ", ", row_end, ") for a weight block of ", weight.size(0),
           " rows of ", num_weights);
  const bool sharded = weight.size(0) != num_weights;
  DT_CHECK(!(sharded && mode == 2), "_embedding_bag: mode max over a vocabulary shard; accepted: sum or mean");
  const int64_t n = indices.numel(), d = weight.size(1);
  const std::vector<int64_t> idx = indices.to(DType::kInt64).contiguous().to_vector<int64_t>();
  std::vector<int64_t> off = offsets.to(DType::kInt64).contiguous().to_vector<int64_t>();
  const int64_t bags = include_last_offset ? std::max<int64_t>(static_cast<int64_t>(off.size()) - 1, 0)
                                           : static_cast<int64_t>(off.size());
  // ATen's CPU kernel ends the last bag at n whatever the last offset says (include_last_offset
  // only drops it): the same here.
  off.resize(static_cast<size_t>(bags));
  off.push_back(n);
  DT_CHECK(off.empty() || off[0] == 0, "_embedding_bag: offsets must start at 0, not ", off[0]);
  for (int64_t b = 0; b < bags; ++b)
    DT_CHECK(off[b] <= off[b + 1] && off[b + 1] <= n, "_embedding_bag: offsets [", off[b], ", ", off[b + 1],
             ") of bag ", b, " do not fit ", n, " indices (offsets must not decrease)");
  const bool weighted = per_sample_weights.defined();
  DT_CHECK(!weighted || (mode == 0 && per_sample_weights.sizes() == indices.sizes()),
           "_embedding_bag: per_sample_weights ", weighted ? shape_str(per_sample_weights.sizes()) : "",
           " with mode ", mode, "; accepted: the indices' shape, with mode 0 (sum)");
  const Tensor wd = weight.to(DType::kFloat64).contiguous();
  const double* wp = wd.data<double>();
  std::vector<double> psw;
  if (weighted) psw = per_sample_weights.to(DType::kFloat64).contiguous().to_vector<double>();
  Tensor out = Tensor::zeros({bags, d}, DType::kFloat64);
  double* op = out.data<double>();
  std::vector<int64_t> offset2bag(static_cast<size_t>(n), 0), bag_size(static_cast<size_t>(bags), 0);
  std::vector<int64_t> argmax(static_cast<size_t>(mode == 2 ? bags * d : 0), 0);
  for (int64_t b = 0; b < bags; ++b) {
    int64_t count = 0;
    for (int64_t i = off[b]; i < off[b + 1]; ++i) {
      offset2bag[i] = b;
      const int64_t row = idx[i];
      DT_CHECK(row >= 0 && row < num_weights, "_embedding_bag: index ", row, " out of range [0, ", num_weights, ")");
      if (row == padding_idx) continue;
      ++count;
      if (row < row_start || row >= row_end) continue;
      const double* wr = wp + (row - row_start) * d;
      double* o = op + b * d;
      if (mode == 2) {
        for (int64_t k = 0; k < d; ++k)
          if (count == 1 || wr[k] > o[k]) {
            o[k] = wr[k];
            argmax[b * d + k] = row;
          }
      } else {
        const double s = weighted ? psw[i] : 1.0;
        for (int64_t k = 0; k < d; ++k) o[k] += s * wr[k];
      }
    }
    bag_size[b] = mode == 0 ? 0 : count;
    if (mode == 1 && count > 0)
      for (int64_t k = 0; k < d; ++k) op[b * d + k] /= static_cast<double>(count);
  }
  const DType it = indices.dtype();
  auto as_index = [&](const std::vector<int64_t>& v, Shape s) { return Tensor::from_vector(v, s).to(it); };
  Tensor max_indices = mode == 2 ? as_index(argmax, {bags, d})
                                 : as_index(mode == 1 ? bag_size : std::vector<int64_t>(bags, 0), {bags});
  if (embedding_bag_offset2bag_is_empty(weight.dtype(), mode, padding_idx)) offset2bag.clear();
  return {out.to(weight.dtype()), as_index(offset2bag, {static_cast<int64_t>(offset2bag.size())}),
          as_index(bag_size, {bags}), max_indices};
}

}  // namespace dtensor::kernels
