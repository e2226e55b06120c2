// DeviceMesh (DESIGN §2): an n-d array of global ranks, row-major, with optional dim names.
// Mesh dim i of a rank defines the group of ranks that differ from it only in coordinate i; the
// mesh creates the ProcessGroup of each of its dims that contains the calling rank.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"
#include "dtensor/core/shape.h"

namespace dtensor {

class DeviceMesh {
 public:
  // Collective over all ranks of `ranks` (default 0..prod(shape)-1, row-major). Ranks outside the
  // mesh may call it too; they get a mesh with no coordinate and no groups.
  // Throws dtensor::Error for an empty or non-positive shape, a rank count that doesn't match the
  // shape, duplicate or out-of-world ranks, or names that aren't one per dim and distinct;
  // dtensor::CommError if a member rank does not join within `timeout`.
  static std::shared_ptr<DeviceMesh> create(std::shared_ptr<Backend> backend, const Shape& shape,
                                            std::vector<std::string> dim_names = {},
                                            std::vector<int> ranks = {},
                                            Timeout timeout = default_timeout());

  int ndim() const { return static_cast<int>(shape_.size()); }
  const Shape& shape() const { return shape_; }
  int64_t size(int dim) const;  // ranks along mesh dim
  int64_t size() const { return numel(shape_); }
  const std::vector<std::string>& dim_names() const { return dim_names_; }
  // Index of a named dim; throws naming the mesh's dims if absent.
  int dim_index(const std::string& name) const;
  const std::vector<int>& ranks() const { return ranks_; }
  int global_rank() const { return backend_->rank(); }
  bool contains_me() const { return !coordinate_.empty(); }
  // This rank's coordinate (empty if not in the mesh).
  const std::vector<int64_t>& coordinate() const { return coordinate_; }
  int64_t coordinate(int dim) const;
  // The group of mesh dim `dim` containing this rank. Throws if this rank is not in the mesh.
  ProcessGroup& group(int dim) const;
  // The sub-mesh over the named dims that contains this rank (sharing this mesh's groups).
  std::shared_ptr<DeviceMesh> submesh(const std::vector<std::string>& names) const;
  Backend& backend() const { return *backend_; }
  const std::shared_ptr<Backend>& backend_ptr() const { return backend_; }
  Timeout timeout() const { return timeout_; }
  // Same ranks in the same layout on the same backend.
  bool same_as(const DeviceMesh& o) const {
    return this == &o || (backend_ == o.backend_ && shape_ == o.shape_ && ranks_ == o.ranks_);
  }
  std::string str() const;  // "DeviceMesh([2, 2], names=[dp, tp])"
  // Total calls and bytes sent by this rank through the mesh's groups.
  CommStats stats() const;

 private:
  DeviceMesh() = default;
  std::shared_ptr<Backend> backend_;
  Shape shape_;
  std::vector<std::string> dim_names_;
  std::vector<int> ranks_;
  std::vector<int64_t> coordinate_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
  Timeout timeout_ = default_timeout();
};

using MeshPtr = std::shared_ptr<const DeviceMesh>;

}  // namespace dtensor
