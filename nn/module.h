// Modules in C++ (PyTorch's nn.Module, reduced): parameters as DTensors that require grad, child
// modules by name, dotted parameter paths ("blocks.0.attn.q_proj.weight"), and an optional parallel
// style whose input/output hooks redistribute activations (nn/parallel.h).
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/functional.h"

namespace dtensor::nn {

class ParallelStyle;

class Module {
 public:
  virtual ~Module() = default;

  // Runs the style's input hook, forward, then the style's output hook.
  DTensor operator()(const DTensor& x);
  virtual DTensor forward(const DTensor& x) = 0;

  // (path, parameter) for this module and its children, depth first, in registration order.
  std::vector<std::pair<std::string, DTensor*>> named_parameters(const std::string& prefix = "");
  // (path, module) for this module ("" for itself) and every descendant.
  std::vector<std::pair<std::string, Module*>> named_modules(const std::string& prefix = "");
  Module* child(const std::string& name) const;

  void set_style(std::shared_ptr<const ParallelStyle> style) { style_ = std::move(style); }
  const std::shared_ptr<const ParallelStyle>& style() const { return style_; }
  // The mesh and the tensor-parallel mesh dim the module's parameters live on (set by parallelize).
  MeshPtr mesh() const { return mesh_; }
  int tp_dim() const { return tp_dim_; }
  void set_mesh(MeshPtr mesh, int tp_dim) {
    mesh_ = std::move(mesh);
    tp_dim_ = tp_dim;
  }

 protected:
  // Registers a parameter given as a full tensor (the same on every rank); it starts replicated
  // on the module's mesh and requires grad. Returns its slot.
  DTensor& add_parameter(const std::string& name, const Tensor& init);
  template <typename M>
  std::shared_ptr<M> add_module(const std::string& name, std::shared_ptr<M> m) {
    children_.emplace_back(name, m);
    return m;
  }

 private:
  friend void parallelize_module(Module& m, const ParallelStyle* style, MeshPtr mesh, int tp_dim, DType dtype,
                                 Device device);
  std::deque<std::pair<std::string, DTensor>> params_;  // deque: add_parameter hands out stable references
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  std::vector<std::pair<std::string, Tensor>> init_;  // full initial values, until placed on a mesh
  std::shared_ptr<const ParallelStyle> style_;
  MeshPtr mesh_;
  int tp_dim_ = 0;
};

// Deterministic parameter initializers (the same full tensor on every rank for a given seed).
Tensor normal_init(const Shape& shape, double std, uint64_t seed);
uint64_t seed_of(const std::string& path, uint64_t base);

}  // namespace dtensor::nn
