#include "dtensor/dtensor_spec.h"

#include "absl/strings/str_join.h"

namespace dtensor {

Placements normalize_placements(const Placements& p, int64_t tensor_rank, int mesh_ndim,
                                const char* what) {
  DT_CHECK(static_cast<int>(p.size()) == mesh_ndim, what, ": ", p.size(), " placements ",
           placements_str(p), " for a ", mesh_ndim, "-d mesh; give one placement per mesh dim");
  Placements out = p;
  for (Placement& x : out) {
    if (!x.is_shard()) continue;
    DT_CHECK(x.dim >= -tensor_rank && x.dim < tensor_rank, what, ": placement ", x.str(),
             " shards dim ", x.dim, " of a ", tensor_rank, "-d tensor (accepted: S(",
             -tensor_rank, ") to S(", tensor_rank - 1, "))");
    if (x.dim < 0) x.dim += static_cast<int32_t>(tensor_rank);
  }
  return out;
}

DTensorSpec::DTensorSpec(MeshPtr m, Placements p, Shape s, DType dt)
    : mesh(std::move(m)), shape(std::move(s)), dtype(dt) {
  DT_CHECK(mesh != nullptr, "DTensorSpec: null mesh");
  placements = normalize_placements(p, static_cast<int64_t>(shape.size()), mesh->ndim(),
                                    "DTensorSpec");
  check_shard_weights(placements, mesh->shape(), "DTensorSpec");
  // Partial dims with different ops would make the global value depend on reduction order.
  const Placement* first = nullptr;
  for (const Placement& x : placements) {
    if (!x.is_partial()) continue;
    if (!first) first = &x;
    DT_CHECK(x.reduce == first->reduce, "DTensorSpec: placements ", placements_str(placements),
             " mix Partial ops; a tensor's Partial mesh dims must share one reduce op");
  }
}

std::pair<Shape, Shape> local_block(const Shape& global, const Placements& placements,
                                    const Shape& mesh_shape, const std::vector<int64_t>& coord,
                                    int skip) {
  Shape size = global, offset(global.size(), 0);
  for (int i = 0; i < static_cast<int>(placements.size()); ++i) {
    const Placement& p = placements[i];
    if (i == skip || !p.is_shard()) continue;
    auto [start, len] = shard_range(p, size[p.dim], mesh_shape[i], coord[i]);
    offset[p.dim] += start;
    size[p.dim] = len;
  }
  return {size, offset};
}

std::pair<Shape, Shape> DTensorSpec::local_block(const std::vector<int64_t>& coord,
                                                 int skip) const {
  return dtensor::local_block(shape, placements, mesh->shape(), coord, skip);
}

Shape DTensorSpec::local_shape() const {
  if (!mesh->contains_me()) return Shape(shape.size(), 0);
  return local_block(mesh->coordinate()).first;
}

bool DTensorSpec::has_partial() const {
  for (const auto& p : placements)
    if (p.is_partial()) return true;
  return false;
}

bool DTensorSpec::is_replicated() const {
  for (const auto& p : placements)
    if (!p.is_replicate()) return false;
  return true;
}

std::string DTensorSpec::str() const {
  return absl::StrCat(placements_str(placements), " ", dtype_name(dtype), shape_str(shape), " on ",
                      mesh->str());
}

bool DTensorSpec::operator==(const DTensorSpec& o) const {
  return placements == o.placements && shape == o.shape && dtype == o.dtype &&
         (mesh == o.mesh || (mesh && o.mesh && mesh->same_as(*o.mesh)));
}

}  // namespace dtensor
