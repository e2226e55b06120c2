// DTensor (DESIGN §2): one logical tensor laid out over a DeviceMesh. Each rank holds its local block.
#pragma once

#include <optional>

#include "dtensor/core/tensor.h"
#include "dtensor/dtensor_spec.h"
#include "dtensor/redistribute.h"

namespace dtensor {

struct AutogradMeta;  // defined by autograd/: requires_grad, grad, grad_fn

class DTensor {
 public:
  DTensor() = default;
  // Wraps an already-laid-out local block. Checks that `local` has the shape the spec gives this rank
  // and spec's dtype; throws dtensor::Error naming both otherwise.
  DTensor(DTensorSpec spec, Tensor local);

  const DTensorSpec& spec() const { return spec_; }
  const MeshPtr& mesh() const { return spec_.mesh; }
  const Placements& placements() const { return spec_.placements; }
  const Shape& shape() const { return spec_.shape; }
  DType dtype() const { return spec_.dtype; }
  int64_t dim() const { return static_cast<int64_t>(spec_.shape.size()); }
  bool defined() const { return spec_.mesh != nullptr; }

  // This rank's block as a plain Tensor (a view, no copy). Not recorded by autograd: use to_local()
  // for the differentiable crossing.
  const Tensor& local_tensor() const { return local_; }
  // The whole tensor on every rank, as a plain Tensor: redistributes to all-Replicate. Collective.
  Tensor full_tensor(Timeout timeout = default_timeout()) const;

  // As PyTorch's DTensor.redistribute: a DTensor with the same values laid out by `placements` (one
  // per mesh dim), differentiable when autograd (//autograd) is recording and this tensor requires
  // grad (backward: DESIGN section 5). Collective over the groups of the mesh dims that change.
  // Throws dtensor::Error for bad placements, CommError from the collectives.
  DTensor redistribute(const Placements& placements, Timeout timeout = default_timeout()) const;
  // The same move, never recorded by autograd.
  DTensor redistribute_untracked(const Placements& placements, Timeout timeout = default_timeout()) const;
  // As PyTorch's DTensor.to_local: this rank's block as a DTensor on the rank's own one-rank mesh
  // (autograd's local tensors, autograd/autograd.h self_mesh), differentiable: its gradient arrives
  // on this tensor's mesh with `grad_placements` (default: these placements). Needs //autograd
  // linked (throws dtensor::Error saying so otherwise); local_tensor() is the plain block.
  DTensor to_local(std::optional<Placements> grad_placements = std::nullopt) const;

  std::string str() const;

  // Autograd bookkeeping, opaque to this layer (autograd/ reads and writes it). Copies of a DTensor
  // share it, like handles to one tensor.
  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_meta_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> m) { autograd_meta_ = std::move(m); }

 private:
  DTensorSpec spec_;
  Tensor local_;
  std::shared_ptr<AutogradMeta> autograd_meta_;
};

// Lays out `global` (the same full tensor on every rank; not checked, as JAX does: no communication)
// over `mesh` by `placements`: each rank keeps its chunk; for Partial, coordinate 0 of that mesh dim
// keeps the value and the others hold op's identity (0 for sum, the value for avg/max/min).
DTensor distribute_tensor(const Tensor& global, MeshPtr mesh, const Placements& placements);

// Wraps this rank's `local` block as a DTensor. `global_shape`, when omitted, is inferred assuming
// even shards (local size × mesh size along each sharded dim), as PyTorch does; give it for uneven
// layouts. Throws if `local` does not have the shape the layout gives this rank.
DTensor from_local(const Tensor& local, MeshPtr mesh, const Placements& placements,
                   std::optional<Shape> global_shape = std::nullopt);

// autograd/ makes DTensor::redistribute and DTensor::to_local differentiable by registering these
// at static initialization (the layer below cannot call up into it).
struct AutogradHooks {
  DTensor (*redistribute)(const DTensor& x, const Placements& placements, Timeout timeout) = nullptr;
  DTensor (*to_local)(const DTensor& x, std::optional<Placements> grad_placements) = nullptr;
};
void set_autograd_hooks(const AutogradHooks& hooks);

// Throws dtensor::Error naming `op` and both meshes unless a and b live on the same mesh.
void check_same_mesh(const char* op, const DTensor& a, const DTensor& b);

}  // namespace dtensor
