// DTensorSpec (DESIGN §2): mesh + placements + global shape + dtype. Local shapes and offsets follow
// torch.chunk semantics: along a sharded dim of size n over k ranks, chunk size is ceil(n/k) and the
// last ranks get the short or empty chunks (10 over 4 -> 3,3,3,1; 5 over 4 -> 2,2,1,0). Mesh dims
// that shard the same tensor dim apply left to right.
#pragma once

#include <utility>

#include "dtensor/core/dtype.h"
#include "dtensor/device_mesh.h"
#include "dtensor/placement.h"

namespace dtensor {

// Start and length of chunk `idx` of a dim of size `n` split over `k` ranks (torch.chunk).
inline std::pair<int64_t, int64_t> chunk_range(int64_t n, int64_t k, int64_t idx) {
  int64_t c = (n + k - 1) / k;
  int64_t start = std::min(n, c * idx);
  return {start, std::min(n, start + c) - start};
}

// Shape and global offset of the block at mesh coordinate `coord` of a `global` tensor laid out by
// `placements` over a mesh of `mesh_shape`; mesh dim `skip` (if >= 0) is treated as Replicate.
std::pair<Shape, Shape> local_block(const Shape& global, const Placements& placements,
                                    const Shape& mesh_shape, const std::vector<int64_t>& coord,
                                    int skip = -1);

struct DTensorSpec {
  MeshPtr mesh;
  Placements placements;
  Shape shape;  // global shape
  DType dtype = DType::kFloat32;

  // Validates and normalizes (negative shard dims counted from the end). Throws dtensor::Error if
  // placements are not one per mesh dim, or a shard dim is out of range for the tensor's rank.
  DTensorSpec(MeshPtr mesh, Placements placements, Shape shape, DType dtype);
  DTensorSpec() = default;

  // Shape and global offset of the block held at mesh coordinate `coord`. Mesh dim `skip` (if >= 0)
  // is treated as Replicate: that gives the block the whole group of that mesh dim holds.
  std::pair<Shape, Shape> local_block(const std::vector<int64_t>& coord, int skip = -1) const;
  // This rank's local shape (all zeros if the rank is outside the mesh).
  Shape local_shape() const;
  bool has_partial() const;
  bool is_replicated() const;  // all R
  std::string str() const;  // "[S(0), R] float32[8, 16] on DeviceMesh([2, 2])"
  bool operator==(const DTensorSpec& o) const;
};

// Same as DTensorSpec's placement normalization, for callers that hold placements alone.
Placements normalize_placements(const Placements& p, int64_t tensor_rank, int mesh_ndim,
                                const char* what);

}  // namespace dtensor
