#include "autograd/autograd.h"

#include <cstring>
#include <map>
#include <queue>
#include <unordered_map>

#include "absl/strings/str_cat.h"

namespace dtensor {

namespace {

thread_local bool t_grad_enabled = true;
thread_local uint64_t t_sequence = 0;

DTensor strip(const DTensor& t) {
  DTensor d = t;
  d.set_autograd_meta(nullptr);
  return d;
}

// Where a leaf's gradient must end up: its own placements, with Partial replaced by Replicate.
Placements grad_placements_for(const Placements& p) {
  Placements out = p;
  for (auto& x : out)
    if (x.is_partial()) x = Replicate();
  return out;
}

DTensor plain_redistribute(const DTensor& g, const Placements& p) {
  return g.placements() == p ? g : g.redistribute_untracked(p);
}

DTensor add_grads(const DTensor& a, const DTensor& b) {
  NoGradGuard ng;
  return call_op1("add", {a, b});
}

class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<AutogradMeta> meta, Placements target)
      : meta_(std::move(meta)), target_(std::move(target)) {}
  std::vector<std::optional<DTensor>> apply(std::vector<std::optional<DTensor>> grads) override {
    if (!grads[0]) return {};
    NoGradGuard ng;
    DTensor g = plain_redistribute(*grads[0], target_);
    meta_->grad = meta_->grad ? add_grads(*meta_->grad, g) : g;
    return {};
  }
  std::string name() const override { return "AccumulateGrad"; }

 private:
  std::shared_ptr<AutogradMeta> meta_;
  Placements target_;
};

// The edge a tensor contributes: its grad_fn, or its leaf accumulator, or nothing.
Edge edge_of(const DTensor& t) {
  const auto& m = t.autograd_meta();
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  auto acc = m->accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(m, grad_placements_for(t.placements()));
    m->accumulator = acc;
  }
  return {acc, 0};
}

// Makes `outputs` the outputs of `node` (those of floating or complex dtype require grad).
void attach(std::vector<DTensor>& outputs, const std::shared_ptr<Node>& node) {
  node->sequence = ++t_sequence;
  node->num_outputs = static_cast<int>(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!is_floating(outputs[i].dtype()) && !is_complex(outputs[i].dtype())) continue;
    auto m = std::make_shared<AutogradMeta>();
    m->requires_grad = true;
    m->grad_fn = node;
    m->output_nr = static_cast<int>(i);
    outputs[i].set_autograd_meta(m);
  }
}

bool any_requires_grad(const std::vector<DTensor>& xs) {
  for (const auto& x : xs)
    if (requires_grad(x)) return true;
  return false;
}

class OpNode : public Node {
 public:
  OpNode(OpCall call, std::vector<DTensor> inputs, std::vector<DTensor> outputs, BackwardFn fn)
      : call_(std::move(call)), inputs_(std::move(inputs)), outputs_(std::move(outputs)), fn_(std::move(fn)) {}
  std::vector<std::optional<DTensor>> apply(std::vector<std::optional<DTensor>> grads) override {
    NoGradGuard ng;
    std::vector<bool> needs(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) needs[i] = next[i].fn != nullptr;
    BackwardCtx ctx{call_, inputs_, outputs_, grads, needs};
    auto out = fn_(ctx);
    DT_CHECK(out.size() == inputs_.size(), call_.name(), " backward: returned ", out.size(),
             " gradients for ", inputs_.size(), " inputs");
    for (size_t i = 0; i < out.size(); ++i) {
      if (!out[i] || !needs[i]) {
        out[i].reset();
        continue;
      }
      DT_CHECK(out[i]->shape() == inputs_[i].shape(), call_.name(), " backward: gradient ", i, " has shape ",
               shape_str(out[i]->shape()), ", the input ", shape_str(inputs_[i].shape()));
      if (out[i]->dtype() != inputs_[i].dtype()) out[i] = call_op1("to", {*out[i], IValue(std::string(dtype_name(inputs_[i].dtype())))});
    }
    return out;
  }
  std::string name() const override { return call_.name() + "Backward"; }

 private:
  OpCall call_;
  std::vector<DTensor> inputs_, outputs_;
  BackwardFn fn_;
};

class FnNode : public Node {
 public:
  using Fn = std::function<std::vector<std::optional<DTensor>>(std::vector<std::optional<DTensor>>)>;
  FnNode(std::string name, Fn fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  std::vector<std::optional<DTensor>> apply(std::vector<std::optional<DTensor>> grads) override {
    NoGradGuard ng;
    return fn_(std::move(grads));
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  Fn fn_;
};

// Records a one-input, one-output differentiable function.
DTensor record_unary(const DTensor& in, DTensor out, const std::string& name, FnNode::Fn fn) {
  if (!grad_enabled() || !requires_grad(in)) return out;
  auto node = std::make_shared<FnNode>(name, std::move(fn));
  node->next = {edge_of(in)};
  std::vector<DTensor> outs{std::move(out)};
  attach(outs, node);
  return outs[0];
}

DTensor ones_like(const DTensor& t) {
  return distribute_tensor(Tensor::full(t.shape(), 1.0, t.dtype(), t.local_tensor().device()), t.mesh(),
                           Placements(t.placements().size(), Replicate()));
}

}  // namespace

DTensor BackwardCtx::grad(int i) const {
  if (grads[i]) return *grads[i];
  const DTensor& o = outputs[i];
  return distribute_tensor(Tensor::zeros(o.shape(), o.dtype(), o.local_tensor().device()), o.mesh(),
                           Placements(o.placements().size(), Replicate()));
}

bool grad_enabled() { return t_grad_enabled; }
NoGradGuard::NoGradGuard() : prev_(t_grad_enabled) { t_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { t_grad_enabled = prev_; }

DTensor& set_requires_grad(DTensor& t, bool on) {
  // Complex too: its gradient is dL/dRe + i dL/dIm of a real loss, torch's convention.
  DT_CHECK(!on || is_floating(t.dtype()) || is_complex(t.dtype()),
           "set_requires_grad: only floating or complex tensors can require grad, got ", dtype_name(t.dtype()));
  auto m = t.autograd_meta();
  DT_CHECK(!m || !m->grad_fn, "set_requires_grad: only leaves (tensors not computed by a recorded op)");
  if (!m) {
    m = std::make_shared<AutogradMeta>();
    t.set_autograd_meta(m);
  }
  m->requires_grad = on;
  return t;
}

bool requires_grad(const DTensor& t) { return t.autograd_meta() && t.autograd_meta()->requires_grad; }

std::optional<DTensor> grad(const DTensor& t) {
  return t.autograd_meta() ? t.autograd_meta()->grad : std::nullopt;
}

void zero_grad(DTensor& t) {
  if (t.autograd_meta()) t.autograd_meta()->grad.reset();
}

DTensor detach(const DTensor& t) { return strip(t); }

void backward(const DTensor& root, std::optional<DTensor> seed) {
  DT_CHECK(requires_grad(root), "backward: the root does not require grad (no recorded op led to it)");
  if (!seed) {
    DT_CHECK(numel(root.shape()) == 1, "backward: the root has shape ", shape_str(root.shape()),
             "; give a seed gradient for non-scalar roots");
    seed = ones_like(root);
  }
  Edge start = edge_of(root);
  // Dependencies: how many edges lead into each node of the graph.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack{start.fn.get()};
  std::unordered_map<Node*, bool> seen{{start.fn.get(), true}};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next) {
      if (!e.fn) continue;
      ++deps[e.fn.get()];
      if (!seen[e.fn.get()]) {
        seen[e.fn.get()] = true;
        stack.push_back(e.fn.get());
      }
    }
  }
  std::unordered_map<Node*, std::vector<std::optional<DTensor>>> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep{{start.fn.get(), start.fn}};
  auto cmp = [](Node* a, Node* b) { return a->sequence < b->sequence; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(cmp)> ready(cmp);
  buffers[start.fn.get()].resize(start.fn->num_outputs);
  buffers[start.fn.get()][start.input_nr] = *seed;
  ready.push(start.fn.get());
  while (!ready.empty()) {
    Node* n = ready.top();
    ready.pop();
    auto grads = std::move(buffers[n]);
    buffers.erase(n);
    grads.resize(n->num_outputs);
    auto outs = n->apply(std::move(grads));
    for (size_t i = 0; i < n->next.size() && i < outs.size(); ++i) {
      const Edge& e = n->next[i];
      if (!e.fn) continue;
      Node* m = e.fn.get();
      keep.emplace(m, e.fn);
      auto& buf = buffers[m];
      buf.resize(m->num_outputs);
      if (outs[i]) buf[e.input_nr] = buf[e.input_nr] ? add_grads(*buf[e.input_nr], *outs[i]) : *outs[i];
      if (--deps[m] == 0) ready.push(m);
    }
  }
}

std::vector<DTensor> call(const std::string& op, const std::vector<OpArg>& args,
                          const std::vector<std::pair<std::string, OpArg>>& kwargs) {
  init_autograd();
  PreparedCall p = prepare_call(op, args, kwargs);
  std::vector<DTensor> outs = run_call(p);
  if (!grad_enabled() || !any_requires_grad(p.inputs)) return outs;
  const OpDef& def = p.call.op();
  DT_CHECK(def.backward != nullptr, op, ": no backward is defined; call it under NoGradGuard or on ",
           "tensors that do not require grad");
  std::vector<DTensor> ins, saved_outs;
  for (const auto& x : p.inputs) ins.push_back(strip(x));
  for (const auto& x : outs) saved_outs.push_back(strip(x));
  auto node = std::make_shared<OpNode>(p.call, std::move(ins), std::move(saved_outs), def.backward->fn);
  for (const auto& x : p.inputs) node->next.push_back(edge_of(x));
  attach(outs, node);
  return outs;
}

DTensor call1(const std::string& op, const std::vector<OpArg>& args,
              const std::vector<std::pair<std::string, OpArg>>& kwargs) {
  auto out = call(op, args, kwargs);
  DT_CHECK(out.size() == 1, op, ": returns ", out.size(), " tensors; use call");
  return out[0];
}

DTensor redistribute(const DTensor& x, const Placements& placements, Timeout timeout) {
  DTensor out = strip(x).redistribute_untracked(placements, timeout);
  Placements back = grad_placements_for(x.placements());
  return record_unary(x, out, "RedistributeBackward", [back](std::vector<std::optional<DTensor>> g) {
    std::vector<std::optional<DTensor>> r(1);
    if (g[0]) r[0] = plain_redistribute(*g[0], back);
    return r;
  });
}

namespace {
// DTensor::redistribute and DTensor::to_local (dtensor/dtensor.h) call these: the differentiable
// forms are the default ones, as in PyTorch.
const bool kHooksRegistered = [] {
  AutogradHooks h;
  h.redistribute = [](const DTensor& x, const Placements& p, Timeout t) { return redistribute(x, p, t); };
  h.to_local = [](const DTensor& x, std::optional<Placements> gp) { return to_local(x, std::move(gp)); };
  set_autograd_hooks(h);
  return true;
}();
}  // namespace

MeshPtr self_mesh(const DeviceMesh& mesh) {
  thread_local std::map<const Backend*, MeshPtr> cache;
  auto& m = cache[&mesh.backend()];
  if (!m) m = DeviceMesh::create(mesh.backend_ptr(), {1}, {}, {mesh.global_rank()});
  return m;
}

DTensor to_local(const DTensor& x, std::optional<Placements> grad_placements) {
  MeshPtr self = self_mesh(*x.mesh());
  DTensor out = from_local(x.local_tensor(), self, {Replicate()});
  out = strip(out);
  MeshPtr mesh = x.mesh();
  Placements gp = grad_placements ? normalize_placements(*grad_placements, x.dim(), mesh->ndim(), "to_local")
                                  : x.placements();
  Shape shape = x.shape();
  return record_unary(x, out, "ToLocalBackward", [mesh, gp, shape](std::vector<std::optional<DTensor>> g) {
    std::vector<std::optional<DTensor>> r(1);
    if (g[0]) r[0] = DTensor(DTensorSpec(mesh, gp, shape, g[0]->dtype()), g[0]->local_tensor());
    return r;
  });
}

DTensor from_local(const DTensor& local, MeshPtr mesh, const Placements& placements,
                   std::optional<Shape> global_shape) {
  DTensor out = dtensor::from_local(local.local_tensor(), mesh, placements, global_shape);
  MeshPtr self = local.mesh();
  // A Partial layout takes a Replicate gradient (DESIGN section 5, as PyTorch's backward does): each
  // rank's piece contributes to the sum with weight 1, so each gets the whole gradient.
  Placements p = grad_placements_for(out.placements());
  return record_unary(local, out, "FromLocalBackward", [self, p](std::vector<std::optional<DTensor>> g) {
    std::vector<std::optional<DTensor>> r(1);
    if (g[0]) r[0] = dtensor::from_local(plain_redistribute(*g[0], p).local_tensor(), self, {Replicate()});
    return r;
  });
}

// ---- Functional collectives on local tensors.
namespace {

Tensor gather_local(const Tensor& x, ProcessGroup& g, int64_t dim, Timeout t) {
  const int k = g.size();
  Tensor in = x.movedim(dim, 0).contiguous();
  Shape s = in.sizes();
  s[0] *= k;
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  g.all_gather(in, out, std::vector<int64_t>(k, in.numel()), t);
  return out.movedim(0, dim).contiguous();
}

Tensor scatter_local(const Tensor& x, ProcessGroup& g, int64_t dim, Timeout t) {
  const int k = g.size();
  DT_CHECK(x.size(dim) % k == 0, "reduce_scatter: dim ", dim, " of ", x.str(), " must split evenly over ", k,
           " ranks");
  Tensor in = x.movedim(dim, 0).contiguous();
  Shape s = in.sizes();
  s[0] /= k;
  Tensor out = Tensor::empty(s, x.dtype(), x.device());
  g.reduce_scatter(in, out, std::vector<int64_t>(k, out.numel()), ReduceOp::kSum, t);
  return out.movedim(0, dim).contiguous();
}

Tensor a2a_local(const Tensor& x, ProcessGroup& g, int64_t split, int64_t concat, Timeout t) {
  const int k = g.size();
  DT_CHECK(x.size(split) % k == 0, "all_to_all: dim ", split, " of ", x.str(), " must split evenly over ", k,
           " ranks");
  // Piece r (split along `split`) goes to rank r; received pieces concatenate along `concat`.
  std::vector<Tensor> pieces;
  const int64_t len = x.size(split) / k;
  for (int r = 0; r < k; ++r) pieces.push_back(x.narrow(split, r * len, len).contiguous());
  Tensor in = Tensor::empty({x.numel()}, x.dtype(), x.device());
  int64_t n = pieces[0].numel();
  for (int r = 0; r < k; ++r) in.narrow(0, r * n, n).view(pieces[r].sizes()).copy_(pieces[r]);
  Tensor out = Tensor::empty({x.numel()}, x.dtype(), x.device());
  g.all_to_all(in, std::vector<int64_t>(k, n), out, std::vector<int64_t>(k, n), t);
  std::vector<Tensor> got;
  for (int r = 0; r < k; ++r) got.push_back(out.narrow(0, r * n, n).view(pieces[0].sizes()));
  return cat(got, concat);
}

// Rows of x (dim 0) split by send[r] to rank r; recv[r] rows from rank r, stacked in rank order.
Tensor a2a_rows(const Tensor& x, ProcessGroup& g, const std::vector<int64_t>& send, const std::vector<int64_t>& recv,
                Timeout t) {
  const size_t k = static_cast<size_t>(g.size());
  DT_CHECK(x.dim() >= 1 && send.size() == k && recv.size() == k, "all_to_all_v: ", x.str(), " with ", send.size(),
           " send and ", recv.size(), " recv splits over ", g.describe(), " (accepted: one split per rank, dim 0 split)");
  int64_t sent = 0, got = 0;
  for (size_t r = 0; r < k; ++r) {
    DT_CHECK(send[r] >= 0 && recv[r] >= 0, "all_to_all_v: negative split at rank ", r);
    sent += send[r];
    got += recv[r];
  }
  DT_CHECK(sent == x.size(0), "all_to_all_v: send splits sum to ", sent, " rows but ", x.str(), " has ", x.size(0));
  const int64_t row = numel(Shape(x.sizes().begin() + 1, x.sizes().end()));  // elements per row
  std::vector<int64_t> sc(k), rc(k);
  for (size_t r = 0; r < k; ++r) {
    sc[r] = send[r] * row;
    rc[r] = recv[r] * row;
  }
  Shape out_shape = x.sizes();
  out_shape[0] = got;
  Tensor in = x.contiguous().view({x.numel()});
  Tensor out = Tensor::empty({got * row}, x.dtype(), x.device());
  g.all_to_all(in, sc, out, rc, t);
  return out.view(out_shape);
}

DTensor on_self(const MeshPtr& self, Tensor t) { return dtensor::from_local(t, self, {Replicate()}); }

}  // namespace

DTensor all_gather(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, int64_t dim) {
  ProcessGroup& g = mesh.group(mesh_dim);
  dim = wrap_dim(dim, local.dim(), "all_gather");
  DTensor out = on_self(local.mesh(), gather_local(local.local_tensor(), g, dim, mesh.timeout()));
  const DeviceMesh* m = &mesh;
  return record_unary(local, out, "AllGatherBackward", [m, mesh_dim, dim, self = local.mesh()](std::vector<std::optional<DTensor>> gr) {
    std::vector<std::optional<DTensor>> r(1);
    if (gr[0]) r[0] = on_self(self, scatter_local(gr[0]->local_tensor(), m->group(mesh_dim), dim, m->timeout()));
    return r;
  });
}

DTensor reduce_scatter(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, int64_t dim) {
  ProcessGroup& g = mesh.group(mesh_dim);
  dim = wrap_dim(dim, local.dim(), "reduce_scatter");
  DTensor out = on_self(local.mesh(), scatter_local(local.local_tensor(), g, dim, mesh.timeout()));
  const DeviceMesh* m = &mesh;
  return record_unary(local, out, "ReduceScatterBackward", [m, mesh_dim, dim, self = local.mesh()](std::vector<std::optional<DTensor>> gr) {
    std::vector<std::optional<DTensor>> r(1);
    if (gr[0]) r[0] = on_self(self, gather_local(gr[0]->local_tensor(), m->group(mesh_dim), dim, m->timeout()));
    return r;
  });
}

DTensor all_reduce(const DTensor& local, const DeviceMesh& mesh, int mesh_dim) {
  Tensor t = local.local_tensor().clone();
  mesh.group(mesh_dim).all_reduce(t, ReduceOp::kSum, mesh.timeout());
  DTensor out = on_self(local.mesh(), t);
  const DeviceMesh* m = &mesh;
  return record_unary(local, out, "AllReduceBackward", [m, mesh_dim, self = local.mesh()](std::vector<std::optional<DTensor>> gr) {
    std::vector<std::optional<DTensor>> r(1);
    if (gr[0]) {
      Tensor u = gr[0]->local_tensor().clone();
      m->group(mesh_dim).all_reduce(u, ReduceOp::kSum, m->timeout());
      r[0] = on_self(self, u);
    }
    return r;
  });
}

DTensor all_to_all(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, int64_t split_dim,
                   int64_t concat_dim) {
  split_dim = wrap_dim(split_dim, local.dim(), "all_to_all");
  concat_dim = wrap_dim(concat_dim, local.dim(), "all_to_all");
  DTensor out = on_self(local.mesh(), a2a_local(local.local_tensor(), mesh.group(mesh_dim), split_dim, concat_dim, mesh.timeout()));
  const DeviceMesh* m = &mesh;
  return record_unary(local, out, "AllToAllBackward",
                      [m, mesh_dim, split_dim, concat_dim, self = local.mesh()](std::vector<std::optional<DTensor>> gr) {
                        std::vector<std::optional<DTensor>> r(1);
                        if (gr[0])
                          r[0] = on_self(self, a2a_local(gr[0]->local_tensor(), m->group(mesh_dim), concat_dim,
                                                          split_dim, m->timeout()));
                        return r;
                      });
}

DTensor all_to_all_v(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, std::vector<int64_t> send_splits,
                     std::vector<int64_t> recv_splits) {
  DTensor out = on_self(local.mesh(), a2a_rows(local.local_tensor(), mesh.group(mesh_dim), send_splits, recv_splits,
                                               mesh.timeout()));
  const DeviceMesh* m = &mesh;
  return record_unary(local, out, "AllToAllVBackward",
                      [m, mesh_dim, send_splits, recv_splits, self = local.mesh()](std::vector<std::optional<DTensor>> gr) {
                        std::vector<std::optional<DTensor>> r(1);
                        if (gr[0])
                          r[0] = on_self(self, a2a_rows(gr[0]->local_tensor(), m->group(mesh_dim), recv_splits,
                                                         send_splits, m->timeout()));
                        return r;
                      });
}

}  // namespace dtensor
