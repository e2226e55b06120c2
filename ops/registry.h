// The op registry (DESIGN §1, ops/): per op its schema, output metadata, local kernel, its
// single-mesh-dim strategy rules (filled in by strategies/), the distributed steps of rules that
// carry one (DESIGN §6), sample inputs for the ground-truth validator, and a backward slot (filled by
// autograd/).
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <source_location>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "dtensor/core/tensor.h"
#include "dtensor/collectives/process_group.h"
#include "ops/op_call.h"

namespace dtensor {

// One row of an op's rules for ONE mesh dim: the placement of every output and every tensor input.
// `step` (0 = none) names a distributed step of the op (OpDef::steps[step - 1]) that this row runs
// after the local kernel instead of replicating the input.
struct Rule {
  absl::InlinedVector<Placement, 2> outputs;
  absl::InlinedVector<Placement, 3> inputs;
  uint8_t step = 0;
  // Bit d set: dim d of input 0 / output 0 must split evenly over every mesh dim sharding it (views
  // that merge or split a sharded dim need it).
  uint32_t even_input0 = 0, even_output0 = 0;
};
using RuleList = std::vector<Rule>;

// A rule expanded to the whole mesh: placements per mesh dim for every output and input.
struct Strategy {
  std::vector<Placements> outputs;
  std::vector<Placements> inputs;
  absl::InlinedVector<uint8_t, 4> steps;  // per mesh dim, as Rule::step
  std::string str() const;  // "[S(0)], [S(0)] <- [S(0)], [R]"
  // The step the strategy runs (0: none) and the mesh dims that carry it.
  uint8_t step() const;
  std::vector<int> step_mesh_dims() const;
};

// What a local kernel may need to know about the layout it runs under.
struct LocalContext {
  const Strategy* strategy = nullptr;  // null: single device (everything whole)
  std::vector<TensorMeta> out_meta;    // global outputs
  Shape mesh_shape{1};
  std::vector<int64_t> coord{0};
  bool single_device() const { return strategy == nullptr; }
  // Local shape and global offset of input / output i at this rank.
  std::pair<Shape, Shape> in_block(const OpCall& call, int i) const;
  std::pair<Shape, Shape> out_block(int i) const;
  // True when input i's block is all of the tensor along `dim`.
  bool in_whole_along(const OpCall& call, int i, int64_t dim) const;
};

using MetaFn = std::function<std::vector<TensorMeta>(const OpCall&)>;
using KernelFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs,
                                                   const OpCall& call, const LocalContext& ctx)>;
// The global output metadata of a call, as OpDef::meta computed it.
using OutMeta = std::vector<TensorMeta>;
// An op's rules for a call; `out` is the call's output metadata (computed once by the caller).
using RuleFn = std::function<RuleList(const OpCall&, const OutMeta& out)>;

// A sample call for the validator: tensor metas and arguments, plus how to fill each tensor.
struct Sample {
  std::vector<TensorMeta> tensors;
  std::vector<ArgValue> positional;
  std::vector<std::pair<std::string, ArgValue>> keyword;
};
using SampleFn = std::function<std::vector<Sample>()>;

struct BackwardDef;  // defined by autograd/

class DeviceMesh;

// The traffic of a distributed step, for the cost model: `rounds` collectives of `collective` kind
// over the product group of the step's mesh dims, together sending `bytes` per rank.
struct StepTraffic {
  CommKind collective = CommKind::kLocal;
  int64_t bytes = 0;
  int rounds = 1;
  // The rounds run while the step computes (ring attention passes the next key/value block during
  // the current block's attention): the cost model charges one round, the rest being hidden.
  bool overlapped = false;
};

// A distributed algorithm that a rule row carries (DESIGN §6): it keeps an input sharded where
// PyTorch would replicate it. A strategy whose rows name a step runs it instead of the plain local
// kernel, once, over all the mesh dims whose rows name it (`mesh_dims`); it computes this rank's
// outputs from its local inputs (calling kernels and collectives on the mesh's groups).
struct StepDef {
  std::string name;  // e.g. "carry_exchange"
  std::function<StepTraffic(const OpCall&, const Strategy&, const std::vector<int>& mesh_dims)> traffic;
  std::function<std::vector<Tensor>(const std::vector<Tensor>& inputs, const OpCall& call,
                                    const LocalContext& ctx, const std::vector<int>& mesh_dims,
                                    const DeviceMesh& mesh, Timeout timeout)>
      run;
  // Valid only when a single mesh dim carries it (e.g. a scan whose dim is sharded twice is not).
  bool one_mesh_dim = false;
  // True when `run` touches its tensors only through kernels, Tensor methods and the mesh's
  // collectives (never host data pointers) and makes its buffers on its inputs' device: then
  // inputs on a device whose groups move that device's memory (ProcessGroup::home(), NCCL) run as
  // they are; otherwise (Gloo or threads with device tensors) `run` gets host copies
  // (dispatch/dispatch.cc), counted as a host fallback "<op> (distributed step)".
  bool runs_on_device = false;
  // True when `run` communicates by point-to-point only (batch_isend_irecv): then a group whose
  // messages move the device's memory (ProcessGroup::p2p_moves: thread ranks too) is enough.
  bool point_to_point_only = false;
  // Further conditions on the strategy (null: none), checked when rules are expanded.
  std::function<bool(const OpCall&, const Strategy&)> valid;
};

// How the offline planner (planner/cost.cc) prices an op's forward compute. Set on OpDef::cost where
// the op is defined; kUnset fails tests/ops:completeness_test and the planner.
enum class CostClass : uint8_t {
  kUnset,
  kView,            // aliases its input: free, no memory traffic
  kCopy,            // moves data without arithmetic (cat, stack, gathers): 0 FLOPs, memory-bound
  kElementwise,     // 1 FLOP per output element
  kTranscendental,  // 8 FLOPs per output element (exp, gelu, pow, ...)
  kContraction,     // matrix products: OpCost::flops counts them
  kNormalization,   // 5 FLOPs per element of input 0 (norms, softmax)
  kLoss,            // 4 FLOPs per element of input 0
  kWindow,          // output elements x kernel window (pooling; input 0's elements without kernel_size)
  kOnePass,         // one pass over the larger of input 0 and output 0 (reductions, scans, selection)
};
const char* cost_class_name(CostClass c);

// The planner's view of an op: its compute class and what its backward keeps (activation memory).
struct OpCost {
  CostClass cls = CostClass::kUnset;
  bool saves_inputs = true;   // its backward reads its tensor inputs
  bool saves_output = false;  // its backward reads its output
  // kContraction: forward FLOPs of a call given its output metadata (null for the other classes).
  std::function<double(const OpCall&, const std::vector<TensorMeta>& out)> flops;
};

// An ATen op besides the op's own name that PyTorch code reaches and that the bridge
// (python/dtensor/torch_bridge.py) runs with this op's rules.
struct AtenAlias {
  std::string name;   // "name" or "name.overload", e.g. "_softmax", "var.dim"
  // How its arguments become this op's: "" the same; "keep:N" the first N positional, no kwargs;
  // otherwise the name of an adapter in torch_bridge.py's _ADAPTERS (tests/python check it exists).
  std::string adapt;
  // The op takes the global size (view, reshape, expand): on a block, ATen gets the output's
  // block shape as its size argument.
  bool local_size = false;
  std::string local;  // the ATen op run on the blocks in its place ("": itself), e.g. "reshape"
};

// How PyTorch meets the op (the bridge and torch.export's import, python/dtensor/). The op's own
// name is an ATen name ("add", "max.dim") unless `not_aten` says why not.
struct AtenFacts {
  // The local kernel reads the layout (LocalContext: global offsets of its blocks, the global count,
  // empty blocks), so ATen on a block computes something else: the bridge runs dtensor's kernel.
  // tests/ops:layout_facts_test runs every kernel with and without its layout and fails where they
  // differ and this is false.
  bool layout_dependent = false;
  std::vector<AtenAlias> aliases;
  std::string not_aten;  // why no ATen op of this name exists (dtensor's or the planner's own op)
};

// An output dim whose size depends on the input's values, not only on its shape (nonzero's row
// count): see OpDef::data_dependent.
struct DataDependentDim {
  int output = 0;  // the output's index
  int dim = 0;     // its dim (>= 0)
};

struct OpDef {
  OpSchema schema;
  std::string family;  // its op family, the folder ops/<family>/ that defines it (ops/family.h)
  MetaFn meta;
  KernelFn kernel;
  RuleFn rules;        // null until strategies/ registers them: then only all-R applies
  SampleFn samples;
  // Valid random data for tensor input `index` of `call` (indices within range, positive bases...);
  // null: any values (random_tensor).
  std::function<Tensor(int index, const OpCall& call, uint64_t seed)> make_input;
  std::vector<StepDef> steps;  // referenced by Rule::step (1-based)
  std::shared_ptr<const BackwardDef> backward;
  OpCost cost;
  // Why the op has no sharding rules (only all-R applies) or no backward (not differentiable); empty
  // when it must have them. tests/ops:completeness_test checks both ways.
  std::string replicate_only;
  std::string no_backward;
  AtenFacts aten;
  // The op takes and makes complex64/complex128 tensors: its meta, kernel (CPU and device) and rules
  // handle them. False (the default): a call with a complex tensor input or output fails in meta
  // (wrapped by ops::define_all_ops) with an error naming the call and the dtype, so that no kernel
  // written for real types ever sees one.
  bool complex = false;
  // Output dims whose size only the data gives (nonzero's row count). `meta` gives each one an upper
  // bound (nonzero: the input's element count): the rules, the cost model and the offline planner
  // see and price that bound. The kernel (or the strategy's distributed step) computes the actual
  // size and the engine builds the output's spec after it runs (settle_output_meta below, called by
  // dispatch's execute_strategy, the validator's simulation and the Python bridge). So no strategy
  // may shard such a dim, and every rank must hold its whole extent: the engine takes this rank's
  // block size as the global size, so the op's step gathers until every rank agrees. The decision
  // caches (propagation/, python/bridge_py.cc) keep the strategy and the bound, never a size.
  std::vector<DataDependentDim> data_dependent;
  // ONNX operators imported as this op when the node's inputs are the op's required tensor
  // arguments in order and its attributes are at their defaults (planner/onnx_import.cc; operators
  // with attributes are mapped there by code). tests/python/test_onnx_import.py checks each name
  // against the ONNX library's operator set.
  std::vector<std::string> onnx;
  const std::string& name() const { return schema.name; }
};

// The global output metadata of `call` run under the output placements `outputs`: `meta` (OpDef::meta's,
// data-dependent dims at their bound) with each dim of OpDef::data_dependent set to its size in this
// rank's output block (`local`, per output). `meta` as it is for an op without such dims. Throws
// dtensor::Error naming the call when a placement shards such a dim (no rule may), a block's rank
// differs from the output's, or a size exceeds meta's bound.
std::vector<TensorMeta> settle_output_meta(const OpCall& call, const std::vector<Placements>& outputs,
                                           std::vector<TensorMeta> meta, const std::vector<Shape>& local);

class Registry {
 public:
  static Registry& get();
  // Adds an op from its ATen schema text; throws if the name is taken.
  OpDef& define(const std::string& schema_text, const std::string& family);
  // Throws dtensor::Error naming the op and listing the registered ops when absent.
  const OpDef& find(const std::string& name) const;
  // The op a registration (rules, steps, samples, backward) attaches to. Throws dtensor::Error
  // naming the op and the registering file:line when the op is not defined: a registration under a
  // misspelt or removed name fails at start-up instead of being skipped.
  OpDef& mutable_find(const std::string& name,
                      std::source_location where = std::source_location::current());
  const OpDef* try_find(const std::string& name) const;
  // The ops a call of `name` may mean, as ATen resolves an op name: a name with an overload
  // ("pow.Tensor_Scalar") means that op alone; a bare name ("pow") means the op of that exact name
  // first, then every "pow.<overload>" in registration order. Empty when none is registered.
  const std::vector<const OpDef*>& overloads(const std::string& name) const;
  std::vector<std::string> names() const;  // sorted

 private:
  std::vector<std::unique_ptr<OpDef>> ops_;
  absl::flat_hash_map<std::string, OpDef*> by_name_;
  absl::flat_hash_map<std::string, std::vector<const OpDef*>> by_base_;  // bare name -> overloads
  absl::flat_hash_map<std::string, std::vector<const OpDef*>> exact_;    // dotted name -> itself
};

}  // namespace dtensor
