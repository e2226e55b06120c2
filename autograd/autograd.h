// Reverse-mode autograd over DTensor ops (DESIGN §5). A DTensor program is differentiated as the
// single-device program it stands for. Backward formulas are written with DTensor ops themselves
// (dispatch/), so gradients are sharded by the same engine; a leaf's gradient is redistributed to the
// leaf's own placements when it is accumulated (a Partial leaf gets a Replicate gradient).
// Local (per-rank) tensors take part as DTensors on the rank's own one-rank mesh (self_mesh).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dispatch/dispatch.h"

namespace dtensor {

class Node;

struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
};

struct AutogradMeta {
  bool requires_grad = false;
  std::optional<DTensor> grad;     // accumulated gradient (leaves)
  std::shared_ptr<Node> grad_fn;   // the node that produced this tensor (null for leaves)
  int output_nr = 0;               // which output of grad_fn
  std::weak_ptr<Node> accumulator; // a leaf's AccumulateGrad node, shared by its uses
};

// A node of the backward graph: given the gradients of its outputs (nullopt: zero), returns the
// gradients of its inputs (nullopt: none / not needed).
class Node {
 public:
  virtual ~Node() = default;
  virtual std::vector<std::optional<DTensor>> apply(std::vector<std::optional<DTensor>> grads) = 0;
  virtual std::string name() const = 0;
  std::vector<Edge> next;  // per input
  uint64_t sequence = 0;   // creation order; later nodes run first
  int num_outputs = 1;
};

// ---- Grad mode (per thread).
bool grad_enabled();
class NoGradGuard {  // RAII: disables recording in its scope
 public:
  NoGradGuard();
  ~NoGradGuard();
 private:
  bool prev_;
};

// ---- Leaves and gradients.
DTensor& set_requires_grad(DTensor& t, bool on = true);
bool requires_grad(const DTensor& t);
std::optional<DTensor> grad(const DTensor& t);
void zero_grad(DTensor& t);
// The same tensor cut from the graph (no grad_fn, not requiring grad).
DTensor detach(const DTensor& t);

// Runs backward from `root` (a one-element DTensor unless `seed` is given, whose gradient is then
// `seed`), accumulating into leaves that require grad. Collective: every rank of the mesh calls it.
// Throws dtensor::Error if root does not require grad.
void backward(const DTensor& root, std::optional<DTensor> seed = std::nullopt);

// ---- Recorded ops: dispatch's call_op plus a backward node when grad is on and an input requires
// grad. Throws what call_op throws, and dtensor::Error if the op has no backward.
std::vector<DTensor> call(const std::string& op, const std::vector<OpArg>& args,
                          const std::vector<std::pair<std::string, OpArg>>& kwargs = {});
DTensor call1(const std::string& op, const std::vector<OpArg>& args,
              const std::vector<std::pair<std::string, OpArg>>& kwargs = {});

// Differentiable redistribution: the gradient goes back to the source placements, except that a
// Partial source gets a Replicate gradient (P->R forward is the identity backward).
DTensor redistribute(const DTensor& x, const Placements& placements, Timeout timeout = default_timeout());

// ---- Local tensors: the rank's own one-rank mesh (cached per backend), and the crossings.
MeshPtr self_mesh(const DeviceMesh& mesh);
// This rank's block of x as a DTensor on self_mesh; its gradient is taken as a DTensor with
// `grad_placements` (default: x's placements) on x's mesh.
DTensor to_local(const DTensor& x, std::optional<Placements> grad_placements = std::nullopt);
// Wraps a self-mesh DTensor as this rank's block of a DTensor on `mesh`; backward redistributes the
// gradient to `placements` and takes its local block.
DTensor from_local(const DTensor& local, MeshPtr mesh, const Placements& placements,
                   std::optional<Shape> global_shape = std::nullopt);

// ---- Functional collectives on local (self-mesh) tensors over mesh dim `mesh_dim`, differentiable
// with the convention that the total loss is the sum of the ranks' losses:
// all_gather <-> reduce_scatter(sum), all_to_all <-> all_to_all with the dims swapped,
// all_reduce(sum) <-> all_reduce(sum). Shapes must be equal on every rank (even split).
DTensor all_gather(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, int64_t dim);
DTensor reduce_scatter(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, int64_t dim);
DTensor all_reduce(const DTensor& local, const DeviceMesh& mesh, int mesh_dim);
DTensor all_to_all(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, int64_t split_dim,
                   int64_t concat_dim);
// Uneven all_to_all along dim 0 (torch.distributed.all_to_all_single with input/output split
// sizes; MoE token dispatch and combine): the first send_splits[0] rows go to group rank 0, the next
// send_splits[1] to rank 1, ...; the result holds recv_splits[r] rows from each rank r in rank order.
// recv_splits[r] must equal rank r's send_splits[this rank] (the caller exchanges the counts first).
// Both lists have one entry >= 0 per rank of the mesh dim; send_splits must sum to local's dim 0
// (dtensor::Error naming all_to_all_v and the shapes otherwise). Backward: the same exchange of the
// gradient with the splits swapped.
DTensor all_to_all_v(const DTensor& local, const DeviceMesh& mesh, int mesh_dim, std::vector<int64_t> send_splits,
                     std::vector<int64_t> recv_splits);

// ---- Backward formulas, per op (registered into OpDef::backward by init_autograd()).
struct BackwardCtx {
  const OpCall& call;
  const std::vector<DTensor>& inputs;   // as given to the op (no autograd meta)
  const std::vector<DTensor>& outputs;  // (no autograd meta)
  const std::vector<std::optional<DTensor>>& grads;  // per output; nullopt = zero
  const std::vector<bool>& needs;  // per input: whether its gradient is wanted
  // grads[i], or zeros like outputs[i].
  DTensor grad(int i) const;
};
using BackwardFn = std::function<std::vector<std::optional<DTensor>>(const BackwardCtx&)>;
// What OpDef::backward points to (ops/registry.h forward-declares it).
struct BackwardDef {
  BackwardFn fn;
};

// Registers every op's backward (idempotent).
void init_autograd();

}  // namespace dtensor
