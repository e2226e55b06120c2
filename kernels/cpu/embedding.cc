#include "kernels/cpu/embedding.h"
#include "kernels/device_dispatch.h"

#include <cstring>
#include <vector>

namespace dtensor::kernels {
namespace {

// Rows [lo, hi) of the full table live in `table` (row i at i - lo). Indices outside the range
// give zero rows when `masked`, else throw.
Tensor gather_rows(const char* op, const Tensor& table, const Tensor& indices, int64_t lo,
                   int64_t hi, bool masked) {
  DT_CHECK(table.dim() == 2, op, ": weight must be 2-d [num_embeddings, embedding_dim], got ",
           shape_str(table.sizes()));
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()), " ",
           shape_str(indices.sizes()));
  const Tensor w = table.contiguous();
  const std::vector<int64_t> idx = indices.to_vector<int64_t>();
  Shape out_shape = indices.sizes();
  out_shape.push_back(w.size(1));
  Tensor out = Tensor::empty(out_shape, w.dtype());
  const size_t row_bytes = static_cast<size_t>(w.size(1)) * w.element_size();
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < idx.size(); ++i, dst += row_bytes) {
    const int64_t v = idx[i];
    if (v >= lo && v < hi) {
      std::memcpy(dst, src + (v - lo) * row_bytes, row_bytes);
    } else {
      DT_CHECK(masked, op, ": index ", v, " out of range for weight ", shape_str(w.sizes()),
               " (accepted: 0 <= index < ", hi, ")");
      std::memset(dst, 0, row_bytes);  // all-zero bits are 0 in every dtype
    }
  }
  return out;
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  DT_KERNEL_ON_DEVICE(embedding, weight, indices);
  DT_CHECK(weight.dim() == 2, "embedding: weight must be 2-d [num_embeddings, embedding_dim], got ",
           shape_str(weight.sizes()));
  return gather_rows("embedding", weight, indices, 0, weight.size(0), false);
}

Tensor embedding_masked(const Tensor& weight_shard, const Tensor& indices, int64_t row_start,
                        int64_t row_end) {
  DT_KERNEL_ON_DEVICE(embedding_masked, weight_shard, indices, row_start, row_end);
  DT_CHECK(weight_shard.dim() == 2 && row_start >= 0 && row_end - row_start == weight_shard.size(0),
           "embedding_masked: weight shard ", shape_str(weight_shard.sizes()),
           " does not hold rows [", row_start, ", ", row_end,
           ") (accepted: a 2-d shard with row_end - row_start rows, "
           "row_start >= 0)");
  return gather_rows("embedding_masked", weight_shard, indices, row_start, row_end, true);
}

}  // namespace dtensor::kernels
