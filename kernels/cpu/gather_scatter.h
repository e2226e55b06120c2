// gather, scatter and scatter_add along a dim (torch.gather / Tensor.scatter / Tensor.scatter_add semantics), also on a
// block of self that holds rows [offset, offset + self.size(dim)) of a dim of `full` entries (a
// shard along dim): gather then reads only the indices the block holds (zero elsewhere: a
// Partial(sum) piece) and scatter_add adds only the contributions that land in it.
#pragma once

#include <cstdint>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// out[p] = self[p with p[dim] = index[p] - offset] for every position p of index (int64 or int32, as many
// dims as self, index.size(d) <= self.size(d) for d != dim); 0 where index[p] is outside the block.
// Result: index's shape, self's dtype (any dtype). full < 0 means self.size(dim) (the whole dim).
// Throws naming gather for a wrong index dtype or rank, sizes over self's, or an index outside
// [0, full).
Tensor gather(const Tensor& self, int64_t dim, const Tensor& index, int64_t offset = 0, int64_t full = -1);

// self with src[p] added at self[p with p[dim] = index[p] - offset] for every position p of index
// (int64 or int32, as many dims as self and src; index.size(d) <= src.size(d) for every d and
// <= self.size(d) for d != dim), in index's row-major order, in the compute type (float for
// float32 / 16-bit floats, double, wrapping int64); contributions outside the block are dropped.
// src has self's dtype. Throws naming scatter_add as gather does.
Tensor scatter_add(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int64_t offset = 0,
                   int64_t full = -1);

// self with src[p] written at self[p with p[dim] = index[p] - offset], in index's row-major order (of
// two writes to one element the later wins, as torch's CPU kernel; torch leaves that order
// unspecified); src has self's dtype; writes outside the block are dropped. Host only. Throws
// naming scatter as gather does.
Tensor scatter(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, int64_t offset = 0,
               int64_t full = -1);

// torch's Tensor.scatter_reduce: every element of self that index points at becomes reduce ("sum",
// "prod", "mean", "amax", "amin") over the src elements landing there, and self's own when
// include_self (else self's is left out; elements nothing lands on keep self's). In the compute type
// (as scatter_add), in index's row-major order; NaN propagates through amax/amin; an integer mean
// rounds down (floor), as torch's. Host only. Throws naming scatter_reduce for an unknown reduce,
// and as gather does.
Tensor scatter_reduce(const Tensor& self, int64_t dim, const Tensor& index, const Tensor& src, const std::string& reduce,
                      bool include_self, int64_t offset = 0, int64_t full = -1);

}  // namespace dtensor::kernels
