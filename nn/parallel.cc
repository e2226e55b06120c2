#include "nn/parallel.h"

#include "nn/layers.h"

namespace dtensor::nn {

DTensor ParallelStyle::on_tp(const DTensor& x, const Module& m, Placement p) {
  if (p.is_shard() && p.dim < 0) p.dim += static_cast<int32_t>(x.dim());
  Placements want = x.placements();
  if (want[m.tp_dim()] == p) return x;
  want[m.tp_dim()] = p;
  return redistribute(x, want);
}

DTensor ParallelStyle::prepare_input(const DTensor& x, const Module&) const { return x; }
DTensor ParallelStyle::prepare_output(const DTensor& y, const Module&) const { return y; }

Placement ColwiseParallel::param_placement(const std::string& name, const Module& m) const {
  // Linear weight [out, in] and bias [out]: shard out. Embedding weight [V, D]: shard D.
  bool embedding = dynamic_cast<const class Embedding*>(&m) != nullptr;
  if (name == "weight") return Shard(embedding ? 1 : 0);
  return Shard(0);
}
DTensor ColwiseParallel::prepare_input(const DTensor& x, const Module& m) const {
  return is_floating(x.dtype()) ? on_tp(x, m, input) : x;
}
DTensor ColwiseParallel::prepare_output(const DTensor& y, const Module& m) const { return on_tp(y, m, output); }

Placement RowwiseParallel::param_placement(const std::string& name, const Module& m) const {
  bool embedding = dynamic_cast<const class Embedding*>(&m) != nullptr;
  if (name == "weight") return Shard(embedding ? 0 : 1);
  return Replicate();
}
DTensor RowwiseParallel::prepare_input(const DTensor& x, const Module& m) const {
  return is_floating(x.dtype()) ? on_tp(x, m, input) : x;
}
DTensor RowwiseParallel::prepare_output(const DTensor& y, const Module& m) const { return on_tp(y, m, output); }
std::string RowwiseParallel::str() const { return "RowwiseParallel(output " + output.str() + ")"; }

DTensor SequenceParallel::prepare_input(const DTensor& x, const Module& m) const {
  return on_tp(x, m, Shard(static_cast<int32_t>(seq_dim)));
}
DTensor SequenceParallel::prepare_output(const DTensor& y, const Module& m) const {
  return on_tp(y, m, Shard(static_cast<int32_t>(seq_dim)));
}

DTensor PrepareModuleInput::prepare_input(const DTensor& x, const Module& m) const { return on_tp(x, m, input); }

bool path_matches(const std::string& pattern, const std::string& path) {
  // Glob with '*' not crossing '.'.
  size_t p = 0, s = 0, star_p = std::string::npos, star_s = 0;
  while (s < path.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star_p = p++;
      star_s = s;
    } else if (p < pattern.size() && pattern[p] == path[s]) {
      ++p;
      ++s;
    } else if (star_p != std::string::npos && path[star_s] != '.') {
      p = star_p + 1;
      s = ++star_s;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

Placements ParallelStyle::param_placements(const std::string& name, const Module& m, const DeviceMesh& mesh,
                                           int tp_dim) const {
  Placements p(mesh.ndim(), Replicate());
  p[tp_dim] = param_placement(name, m);
  return p;
}

void parallelize_module(Module& m, const ParallelStyle* style, MeshPtr mesh, int tp_dim, DType dtype,
                        Device device) {
  m.set_mesh(mesh, tp_dim);
  for (size_t i = 0; i < m.params_.size(); ++i) {
    const std::string& name = m.params_[i].first;
    Tensor init = m.params_[i].second.defined() ? m.params_[i].second.full_tensor() : m.init_[i].second;
    Placements p(mesh->ndim(), Replicate());
    if (style) p = style->param_placements(name, m, *mesh, tp_dim);
    DTensor d = distribute_tensor(init.to(dtype).to(device), mesh, p);
    set_requires_grad(d);
    m.params_[i].second = d;
  }
}

void parallelize(Module& model, MeshPtr mesh, const ParallelPlan& plan, int tp_dim, DType dtype,
                 Device device) {
  DT_CHECK(mesh != nullptr && tp_dim >= 0 && tp_dim < mesh->ndim(), "parallelize: tp mesh dim ", tp_dim,
           " out of range for ", mesh ? mesh->str() : "no mesh");
  std::vector<bool> used(plan.size(), false);
  for (auto& [path, m] : model.named_modules()) {
    const ParallelStyle* style = nullptr;
    for (size_t k = 0; k < plan.size(); ++k)
      if (path_matches(plan[k].first, path)) {
        m->set_style(plan[k].second);
        style = plan[k].second.get();
        used[k] = true;
        break;
      }
    parallelize_module(*m, style, mesh, tp_dim, dtype, device);
  }
  for (size_t k = 0; k < plan.size(); ++k)
    DT_CHECK(used[k], "parallelize: plan entry '", plan[k].first, "' (", plan[k].second->str(),
             ") matches no module");
}

}  // namespace dtensor::nn

namespace dtensor::nn {

ParallelPlan megatron_plan(bool sp, bool loss_parallel) {
  auto col = [](Placement in, Placement out) {
    auto s = std::make_shared<ColwiseParallel>();
    s->input = in;
    s->output = out;
    return std::shared_ptr<const ParallelStyle>(s);
  };
  auto row = [](Placement out) {
    auto s = std::make_shared<RowwiseParallel>();
    s->output = out;
    return std::shared_ptr<const ParallelStyle>(s);
  };
  const Placement act = sp ? Shard(1) : Replicate();  // activations between blocks on tp
  ParallelPlan plan;
  plan.push_back({"tok_emb", row(act)});
  for (const char* p : {"blocks.*.attn.q_proj", "blocks.*.attn.k_proj", "blocks.*.attn.v_proj", "blocks.*.mlp.fc"})
    plan.push_back({p, col(Replicate(), Shard(-1))});
  plan.push_back({"blocks.*.attn.out_proj", row(act)});
  plan.push_back({"blocks.*.mlp.proj", row(act)});
  if (sp) {
    auto gather = std::make_shared<PrepareModuleInput>();
    gather->input = Replicate();
    plan.push_back({"blocks.*.attn", gather});
    plan.push_back({"blocks.*.mlp", gather});
    for (const char* p : {"blocks.*.ln1", "blocks.*.ln2", "ln_f"}) plan.push_back({p, std::make_shared<SequenceParallel>()});
  }
  plan.push_back({"lm_head", col(Replicate(), loss_parallel ? Shard(-1) : Replicate())});
  return plan;
}

}  // namespace dtensor::nn
