// A named device mesh for the offline planner: sizes and names of 1 to 3 mesh dims (4 when one is
// "pp", the pipeline stages: each stage's mesh then has 3), written
// "dp=8,tp=8" (names optional: "8,8" or "8x8" name them d0, d1, ...). Mesh dims are laid out
// row-major over ranks (the last dim innermost), as DeviceMesh does, so the hardware profile puts the
// innermost dims within a host (HardwareProfile::links_for_mesh).
#pragma once

#include <string>
#include <vector>

#include "dtensor/core/shape.h"

namespace dtensor::planner {

struct MeshSpec {
  Shape shape;
  std::vector<std::string> names;

  int ndim() const { return static_cast<int>(shape.size()); }
  int64_t size() const { return numel(shape); }
  std::string str() const;        // "dp=8,tp=8"
  int index_of(const std::string& name) const;  // -1 when absent
  // Parses "dp=8,tp=8", "tp=8", "8,8", "8x8". Throws dtensor::Error saying what is accepted for an
  // empty spec, a size < 1, a repeated name, or more than 3 dims (4 with a dim named pp).
  static MeshSpec parse(const std::string& text);
};

}  // namespace dtensor::planner
