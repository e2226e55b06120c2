// DTensorSpec (DESIGN §2): mesh + placements + global shape + dtype. Local shapes and offsets follow
// torch.chunk semantics: along a sharded dim of size n over k ranks, chunk size is ceil(n/k) and the
// last ranks get the short or empty chunks (10 over 4 -> 3,3,3,1; 5 over 4 -> 2,2,1,0). Mesh dims
// that shard the same tensor dim apply left to right. A weighted shard S(d)[w...] splits by weight
// instead (weighted_range in placement.h).
#pragma once

#include <utility>

#include "dtensor/core/dtype.h"
#include "dtensor/device_mesh.h"
#include "dtensor/placement.h"

namespace dtensor {

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
  // placements are not one per mesh dim, a shard dim is out of range for the tensor's rank, or a
  // weighted shard has not one weight per rank of its mesh dim.
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
