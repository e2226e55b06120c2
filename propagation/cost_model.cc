#include "propagation/cost_model.h"

namespace dtensor {

double collective_time_us(CommKind kind, int64_t bytes, int64_t n, const LinkModel& link) {
  if (n <= 1 || kind == CommKind::kLocal) return 0.0;
  return link.time_us(kind, bytes, n);
}

double plan_time_us(const RedistributePlan& plan, const Shape& mesh_shape,
                    const std::vector<LinkModel>& links, std::vector<CollectiveRecord>* out) {
  double t = 0;
  for (const RedistributeStep& s : plan.steps) {
    if (s.kind == CommKind::kLocal) continue;
    double dt = collective_time_us(s.kind, s.bytes, mesh_shape[s.mesh_dim], links[s.mesh_dim]);
    t += dt;
    if (out) out->push_back({s.kind, s.mesh_dim, s.bytes, dt});
  }
  return t;
}

}  // namespace dtensor
