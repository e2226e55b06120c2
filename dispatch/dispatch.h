// The DTensor op-call path (DESIGN §1): build the op's call from the input specs -> look up the
// cache or propagate (choose a strategy) -> redistribute inputs as the strategy requires -> run the
// local kernel (and the strategy's own distributed step) -> wrap the outputs with the output specs.
// (autograd/ records the backward node on top of this.)
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dtensor/dtensor.h"
#include "propagation/propagate.h"

namespace dtensor {

// Registers every op definition and rule (idempotent, thread-safe). call_op calls it.
void init_ops();

// An argument of call_op: a DTensor, a list of DTensors (cat, stack; an undefined DTensor() entry is
// None, which only a Tensor?[] argument accepts: index.Tensor's {DTensor(), i} is x[:, i]) or a plain value.
using OpArg = std::variant<DTensor, std::vector<DTensor>, IValue>;

struct CallOptions {
  const HardwareProfile* hardware = nullptr;  // cost model; default default_hardware()
  Timeout timeout = default_timeout();          // for the collectives
};

// Calls op `name` (ATen name, e.g. "mm", "sum", "max.dim") on DTensors; collective over the mesh.
// Throws dtensor::Error for an unknown op (listing the registered ones), arguments the schema
// rejects, shapes the op rejects (naming op, shapes and placements), or inputs on different meshes;
// dtensor::CommError from the collectives.
std::vector<DTensor> call_op(const std::string& name, const std::vector<OpArg>& args,
                             const std::vector<std::pair<std::string, OpArg>>& kwargs = {},
                             const CallOptions& options = {});
// The bound call of op `name` on tensor inputs with these specs (positional and keyword arguments
// already lowered, tensors as TensorRef/TensorListRef into `specs`): the one binding step of every
// front door (prepare_call below, and the Python bridge's, python/bridge_py.cc, whose inputs are
// specs of torch tensors). Throws dtensor::Error for an unknown op or overload, arguments the schema
// rejects, no tensor input, or inputs on different meshes (naming both).
OpCall bind_call(const std::string& name, const std::vector<ArgValue>& pos,
                 const std::vector<std::pair<std::string, ArgValue>>& kw,
                 const std::vector<const DTensorSpec*>& specs);

// call_op in two halves, for autograd/ (which needs the bound call and the inputs):
struct PreparedCall {
  OpCall call;
  std::vector<DTensor> inputs;  // the tensor inputs in the call's order
};
PreparedCall prepare_call(const std::string& name, const std::vector<OpArg>& args,
                          const std::vector<std::pair<std::string, OpArg>>& kwargs);
std::vector<DTensor> run_call(const PreparedCall& p, const CallOptions& options = {});

// call_op for ops with one output.
DTensor call_op1(const std::string& name, const std::vector<OpArg>& args,
                 const std::vector<std::pair<std::string, OpArg>>& kwargs = {},
                 const CallOptions& options = {});

// Runs `call` under a given strategy on this rank: inputs are redistributed from their placements to
// strategy.inputs (through `plans` when given, one per input), then the kernel and the strategy's
// own steps run, and the outputs are wrapped. Used by call_op, `dtensor explain --run` and the
// ground-truth validator (which forces every rule in turn).
std::vector<DTensor> execute_strategy(
    const OpCall& call, const Strategy& strategy, const std::vector<TensorMeta>& out_meta,
    const std::vector<DTensor>& inputs, Timeout timeout,
    const std::vector<std::shared_ptr<const RedistributePlan>>* plans = nullptr);

// execute_strategy's second half, on this rank's blocks already laid out as strategy.inputs
// (`locals`, one per tensor input; none for a factory, dispatch/factory.h): the kernel or the
// strategy's own step on `mesh`, the outputs wrapped with strategy.outputs and `out_meta` (a
// data-dependent dim, OpDef::data_dependent, settled from the blocks). Throws dtensor::Error for an
// op with no kernel (the planned family) or locals on different devices; dtensor::CommError from a
// step's collectives.
std::vector<DTensor> run_strategy(const OpCall& call, const Strategy& strategy, const std::vector<TensorMeta>& out_meta,
                                  const MeshPtr& mesh, std::vector<Tensor> locals, Timeout timeout);

// The single-device op on whole tensors: the reference every strategy is checked against.
std::vector<Tensor> run_single_device(const OpCall& call, const std::vector<Tensor>& inputs);

// Devices: an op runs where its local tensors are (all on one device, else dtensor::Error naming
// the op and the devices). Op kernels are device-generic: each kernel function they call runs its
// CUDA implementation for CUDA tensors, or its cpu code on host copies when it has none
// (kernels/device_dispatch.h). A distributed step (DESIGN §6) on device tensors runs on them as
// they are when it is device-generic (StepDef::runs_on_device: the scans' carry exchange, the
// softmax statistics, the candidate gather of max/min/argmax/argmin, the pooling forward's halo
// exchange) and every group it uses moves that device's memory (ProcessGroup::home():
// NCCL); otherwise (Gloo, threads, or a step that reads host memory) on host copies, its outputs
// copied back. kernels::host_fallback_counts() says what left the device.

}  // namespace dtensor
