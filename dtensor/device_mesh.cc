#include "dtensor/device_mesh.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_join.h"

namespace dtensor {

std::shared_ptr<DeviceMesh> DeviceMesh::create(std::shared_ptr<Backend> backend, const Shape& shape,
                                               std::vector<std::string> dim_names,
                                               std::vector<int> ranks, Timeout timeout) {
  DT_CHECK(backend != nullptr, "DeviceMesh: null backend");
  DT_CHECK(!shape.empty(), "DeviceMesh: empty mesh shape; give one size per mesh dim, e.g. [4]");
  for (int64_t s : shape)
    DT_CHECK(s >= 1, "DeviceMesh: mesh shape ", shape_str(shape), " has a non-positive size");
  const int64_t n = numel(shape);
  if (ranks.empty()) {
    ranks.resize(n);
    for (int64_t i = 0; i < n; ++i) ranks[i] = static_cast<int>(i);
  }
  DT_CHECK(static_cast<int64_t>(ranks.size()) == n, "DeviceMesh: ", ranks.size(),
           " ranks for mesh shape ", shape_str(shape), " (needs ", n, ")");
  DT_CHECK(n <= backend->world_size(), "DeviceMesh: mesh shape ", shape_str(shape), " needs ", n,
           " ranks but the world has ", backend->world_size());
  std::set<int> seen;
  for (int r : ranks) {
    DT_CHECK(r >= 0 && r < backend->world_size(), "DeviceMesh: rank ", r,
             " is outside the world of ", backend->world_size());
    DT_CHECK(seen.insert(r).second, "DeviceMesh: rank ", r, " appears twice");
  }
  if (!dim_names.empty()) {
    DT_CHECK(dim_names.size() == shape.size(), "DeviceMesh: ", dim_names.size(),
             " dim names for a ", shape.size(), "-d mesh");
    DT_CHECK(std::set<std::string>(dim_names.begin(), dim_names.end()).size() == dim_names.size(),
             "DeviceMesh: dim names [", absl::StrJoin(dim_names, ", "), "] repeat a name");
  }
  std::shared_ptr<DeviceMesh> m(new DeviceMesh());
  m->backend_ = std::move(backend);
  m->shape_ = shape;
  m->dim_names_ = std::move(dim_names);
  m->ranks_ = std::move(ranks);
  m->timeout_ = timeout;
  // A one-rank mesh needs no agreement with other ranks, so it must not consume the shared sequence
  // (ranks may create their own one-rank meshes at different times).
  const bool solo = m->ranks_.size() == 1;
  const int seq = solo ? -1 : m->backend_->next_mesh_sequence();
  auto it = std::find(m->ranks_.begin(), m->ranks_.end(), m->backend_->rank());
  if (it == m->ranks_.end()) return m;  // not a member: no coordinate, no groups

  // Row-major coordinate of this rank.
  int64_t flat = it - m->ranks_.begin();
  m->coordinate_.assign(shape.size(), 0);
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    m->coordinate_[d] = flat % shape[d];
    flat /= shape[d];
  }
  Shape strides = contiguous_strides(shape);
  for (int d = 0; d < m->ndim(); ++d) {
    int64_t base = 0;
    for (int k = 0; k < m->ndim(); ++k)
      if (k != d) base += m->coordinate_[k] * strides[k];
    std::vector<int> members;
    for (int64_t c = 0; c < shape[d]; ++c) members.push_back(m->ranks_[base + c * strides[d]]);
    std::string name = solo ? absl::StrCat("solo", members[0])
                            : absl::StrCat("mesh", seq, "/dim", d, "/", absl::StrJoin(members, "-"));
    m->groups_.push_back(m->backend_->new_group(members, name, timeout));
  }
  return m;
}

int64_t DeviceMesh::size(int dim) const {
  DT_CHECK(dim >= 0 && dim < ndim(), "DeviceMesh::size: mesh dim ", dim, " out of range for ",
           str());
  return shape_[dim];
}

int DeviceMesh::dim_index(const std::string& name) const {
  auto it = std::find(dim_names_.begin(), dim_names_.end(), name);
  DT_CHECK(it != dim_names_.end(), "DeviceMesh: no dim named '", name, "' in ", str());
  return static_cast<int>(it - dim_names_.begin());
}

int64_t DeviceMesh::coordinate(int dim) const {
  DT_CHECK(contains_me(), "DeviceMesh: rank ", global_rank(), " is not in ", str());
  DT_CHECK(dim >= 0 && dim < ndim(), "DeviceMesh::coordinate: mesh dim ", dim,
           " out of range for ", str());
  return coordinate_[dim];
}

ProcessGroup& DeviceMesh::group(int dim) const {
  DT_CHECK(contains_me(), "DeviceMesh::group: rank ", global_rank(), " is not in ", str());
  DT_CHECK(dim >= 0 && dim < ndim(), "DeviceMesh::group: mesh dim ", dim, " out of range for ",
           str());
  return *groups_[dim];
}

std::shared_ptr<DeviceMesh> DeviceMesh::submesh(const std::vector<std::string>& names) const {
  DT_CHECK(contains_me(), "DeviceMesh::submesh: rank ", global_rank(), " is not in ", str());
  DT_CHECK(!names.empty(), "DeviceMesh::submesh: no dim names given; ", str());
  std::vector<int> dims;
  for (const auto& n : names) dims.push_back(dim_index(n));
  std::shared_ptr<DeviceMesh> m(new DeviceMesh());
  m->backend_ = backend_;
  m->timeout_ = timeout_;
  m->dim_names_ = names;
  for (int d : dims) {
    m->shape_.push_back(shape_[d]);
    m->coordinate_.push_back(coordinate_[d]);
    m->groups_.push_back(groups_[d]);
  }
  // Ranks of the sub-mesh: vary the chosen dims, keep this rank's coordinate elsewhere.
  Shape strides = contiguous_strides(shape_);
  std::vector<int64_t> c = coordinate_;
  int64_t n = numel(m->shape_);
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rem = flat;
    for (int i = static_cast<int>(dims.size()) - 1; i >= 0; --i) {
      c[dims[i]] = rem % m->shape_[i];
      rem /= m->shape_[i];
    }
    int64_t idx = 0;
    for (int d = 0; d < ndim(); ++d) idx += c[d] * strides[d];
    m->ranks_.push_back(ranks_[idx]);
  }
  return m;
}

std::string DeviceMesh::str() const {
  std::string s = absl::StrCat("DeviceMesh(", shape_str(shape_));
  if (!dim_names_.empty()) absl::StrAppend(&s, ", names=[", absl::StrJoin(dim_names_, ", "), "]");
  return s + ")";
}

CommStats DeviceMesh::stats() const {
  CommStats s;
  for (const auto& g : groups_) {
    s.calls += g->stats().calls;
    s.bytes_sent += g->stats().bytes_sent;
    for (int k = 0; k < kNumCommKinds; ++k) s.calls_by_kind[k] += g->stats().calls_by_kind[k];
  }
  return s;
}

}  // namespace dtensor
