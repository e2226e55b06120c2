#include "dtensor/dtensor.h"

#include "absl/strings/str_join.h"

namespace dtensor {

DTensor::DTensor(DTensorSpec spec, Tensor local) : spec_(std::move(spec)), local_(std::move(local)) {
  DT_CHECK(local_.defined(), "DTensor: undefined local tensor for ", spec_.str());
  DT_CHECK(local_.dtype() == spec_.dtype, "DTensor: local tensor ", local_.str(),
           " does not have the spec's dtype ", dtype_name(spec_.dtype));
  Shape want = spec_.local_shape();
  if (spec_.mesh->contains_me()) {
    DT_CHECK(local_.sizes() == want, "DTensor: local tensor ", local_.str(), " at mesh coordinate [",
             absl::StrJoin(spec_.mesh->coordinate(), ", "), "] should have shape ", shape_str(want),
             " for ", spec_.str());
  }
}

namespace {
AutogradHooks& hooks() {
  static AutogradHooks h;
  return h;
}
}  // namespace

void set_autograd_hooks(const AutogradHooks& h) { hooks() = h; }

Tensor DTensor::full_tensor(Timeout timeout) const {
  Placements all_r(spec_.placements.size(), Replicate());
  return redistribute_untracked(all_r, timeout).local_tensor();
}

DTensor DTensor::redistribute(const Placements& placements, Timeout timeout) const {
  // Only a tensor autograd has seen (a leaf requiring grad, or an op's output) can need a node.
  if (autograd_meta_ && hooks().redistribute) return hooks().redistribute(*this, placements, timeout);
  return redistribute_untracked(placements, timeout);
}

DTensor DTensor::to_local(std::optional<Placements> grad_placements) const {
  DT_CHECK(hooks().to_local != nullptr, "DTensor::to_local: the differentiable local tensor needs //autograd "
           "linked; local_tensor() gives this rank's block as a plain Tensor");
  return hooks().to_local(*this, std::move(grad_placements));
}

DTensor DTensor::redistribute_untracked(const Placements& placements, Timeout timeout) const {
  DT_CHECK(defined(), "redistribute: undefined DTensor");
  auto plan = plan_redistribute(spec_, placements);
  DTensorSpec dst(spec_.mesh, plan->dst, spec_.shape, spec_.dtype);
  Tensor out = redistribute_local(local_, spec_, *plan, timeout);
  return DTensor(std::move(dst), std::move(out));
}

std::string DTensor::str() const {
  return absl::StrCat("DTensor(", spec_.str(), ", local ", shape_str(local_.sizes()), ")");
}

DTensor distribute_tensor(const Tensor& global, MeshPtr mesh, const Placements& placements) {
  DT_CHECK(mesh != nullptr, "distribute_tensor: null mesh");
  DTensorSpec spec(mesh, placements, global.sizes(), global.dtype());
  if (!mesh->contains_me()) return DTensor(spec, Tensor::empty(spec.local_shape(), global.dtype(), global.device()));
  // Start fully replicated, then apply each mesh dim's R->placement step: all local.
  Placements all_r(placements.size(), Replicate());
  DTensorSpec rep(mesh, all_r, global.sizes(), global.dtype());
  RedistributePlan plan{all_r, spec.placements, {}};
  for (int i = 0; i < mesh->ndim(); ++i)
    plan.steps.push_back({i, Replicate(), spec.placements[i], CommKind::kLocal, 0});
  return DTensor(spec, redistribute_local(global, rep, plan, mesh->timeout()));
}

DTensor from_local(const Tensor& local, MeshPtr mesh, const Placements& placements,
                   std::optional<Shape> global_shape) {
  DT_CHECK(mesh != nullptr, "from_local: null mesh");
  Placements p = normalize_placements(placements, local.dim(), mesh->ndim(), "from_local");
  Shape shape = global_shape ? *global_shape : local.sizes();
  if (!global_shape) {
    for (int i = 0; i < mesh->ndim(); ++i)
      if (p[i].is_shard()) shape[p[i].dim] *= mesh->shape()[i];
  }
  DT_CHECK(static_cast<int64_t>(shape.size()) == local.dim(), "from_local: global shape ",
           shape_str(shape), " and local ", local.str(), " differ in rank");
  return DTensor(DTensorSpec(mesh, p, shape, local.dtype()), local);
}

void check_same_mesh(const char* op, const DTensor& a, const DTensor& b) {
  DT_CHECK(a.mesh() && b.mesh() && a.mesh()->same_as(*b.mesh()), op,
           ": tensors are on different meshes: ", a.mesh() ? a.mesh()->str() : "none", " and ",
           b.mesh() ? b.mesh()->str() : "none", "; redistribute both onto one mesh first");
}

}  // namespace dtensor
