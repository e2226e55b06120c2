// Advanced indexing (ATen's index.Tensor and index_put: x[i], x[:, i, j], x[i] = v), torch's
// semantics: `indices` holds one entry per leading dim of self (at most self.dim()), an undefined
// Tensor for a dim left alone (None, ":"), at least one defined; the defined ones are int64 or int32
// (a bool mask is refused: its positions are data; the caller expands it with nonzero, as torch
// does) and broadcast together to B; a negative index counts from the end of its dim. The result is
// self's dims with the indexed ones replaced by B: in their place when the indexed dims are
// adjacent, else B first and the other dims after (torch's rule, "Combining advanced and basic
// indexing" in NumPy's indexing docs).
//
// On a block of self (a shard): `offset` and `full` give, per dim of self, the block's first
// element and the dim's global size (empty: the whole tensor). Indices are checked against the
// global size; the lookup reads the positions the block holds along the indexed dims (zero
// elsewhere: a Partial(sum) piece) and index_put writes only what lands in the block. Host only
// (DT_KERNEL_HOST_ONLY: device tensors run here on host copies).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// Where index.Tensor's result dims come from (shapes only: the engine's meta and rules use it).
struct AdvancedIndexLayout {
  std::vector<int64_t> indexed;     // self's dims with an index, ascending
  Shape broadcast;                  // the index tensors' broadcast shape B
  int64_t first = 0;                // the result dim where B begins
  std::vector<int64_t> result_dim;  // per dim of self: its result dim, -1 for an indexed dim
  Shape result;                     // the result's shape
};

// The layout of self[indices] for index shapes (nullopt: None). Throws naming `op` for more
// indices than self's dims, none given, or index shapes that do not broadcast.
AdvancedIndexLayout advanced_index_layout(const char* op, const Shape& self,
                                          const std::vector<std::optional<Shape>>& indices);

// self[indices] (aten.index.Tensor), self's dtype (any). Throws naming index for a bool or
// floating index, shapes as advanced_index_layout, or an index outside [-full, full) (naming the
// index, the dim and its size).
Tensor index(const Tensor& self, const std::vector<Tensor>& indices, const Shape& offset = {},
             const Shape& full = {});

// self with values written at self[indices] (aten.index_put): values (self's dtype) broadcasts to
// the shape self[indices] has on this block; with accumulate they are added (in the compute type:
// float for float32 and 16-bit floats, double, int64), else written, in B's row-major order (of two
// writes to one element the later wins, as torch's serial CPU kernel; torch leaves it unspecified).
// Throws naming index_put as index does, and for values of another dtype or a shape that does not
// broadcast.
Tensor index_put(const Tensor& self, const std::vector<Tensor>& indices, const Tensor& values, bool accumulate,
                 const Shape& offset = {}, const Shape& full = {});

}  // namespace dtensor::kernels
