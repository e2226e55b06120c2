// Limits on sizes that come from input, and overflow-checked arithmetic for element counts and byte
// sizes. Every size a user, a file or a request hands to dtensor passes through these checks, so an
// absurd size is an Error naming it instead of a wrapped product, a hang or an 8 TB allocation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dtensor/core/error.h"

namespace dtensor {

// Tensor rank (number of dims). PyTorch has no fixed limit; 64 is far above any real model and keeps
// per-dim loops and rule expansion bounded.
inline constexpr int64_t kMaxTensorRank = 64;
// Bytes of one global tensor the engine reasons about (64 TiB; a Llama-70B logits tensor of batch
// 4096 x seq 8192 in float32 is 16 TiB). With kMaxMeshDimSize it keeps every ring-traffic formula
// (bytes * 2 * (n - 1)) inside int64.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 46;
// Mesh dims and ranks. Rule expansion is a product over mesh dims (rows^ndim), so the dim count is
// what bounds propagation time; 2^20 ranks is above the largest clusters built.
inline constexpr int64_t kMaxMeshDims = 6;
inline constexpr int64_t kMaxMeshDimSize = int64_t{1} << 16;
inline constexpr int64_t kMaxMeshRanks = int64_t{1} << 20;
// Nodes of one model graph (graph JSON, ONNX): 2^20, above any real model's op count (Llama-3 70B
// is ~10^4) and what the planner's tables can hold.
inline constexpr int64_t kMaxGraphNodes = int64_t{1} << 20;
// One allocation on the host (256 TiB): above it the size-class arithmetic of the block cache and
// every aligned_alloc request would be meaningless.
inline constexpr size_t kMaxAllocationBytes = size_t{1} << 48;

// a * b for non-negative a, b; throws Error("<what>: ... overflows int64") on overflow.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r;
  DT_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " * ", b, " overflows int64");
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r;
  DT_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows int64");
  return r;
}

}  // namespace dtensor
