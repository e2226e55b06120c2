// Distributed steps marked StepDef::runs_on_device, on device blocks over groups that move device
// memory (the fake device's backend, tests/testing/fake_device_backend.h, standing in for NCCL):
// every such step of every op, on each of the op's samples, on 2 thread ranks, gives the
// single-device cpu result, leaves its outputs on the device and runs no part of itself on host
// copies (no "<op> (distributed step)" host fallback); over thread groups (host memory, as Gloo) the
// same step runs on host copies and is counted as a host fallback, except a point-to-point-only one
// (ring attention), whose messages thread ranks move on the device. The fake device stores every byte inverted,
// so a step that read device memory through a host pointer would compute garbage.
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "kernels/device_dispatch.h"
#include "ops/registry.h"
#include "tests/ops/simulated_mesh.h"
#include "tests/testing/fake_device.h"
#include "tests/testing/fake_device_backend.h"

namespace dtensor {
namespace {

using testing::fake_cuda;
using testing::make_globals;

constexpr int kWorld = 2;
const Timeout kTimeout = std::chrono::seconds(30);

bool close(const Tensor& got, const Tensor& want) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) return false;
  auto g = got.to(DType::kFloat64).to_vector<double>(), w = want.to(DType::kFloat64).to_vector<double>();
  const double tol = want.dtype() == DType::kFloat64 ? 1e-12 : 1e-5;
  for (size_t k = 0; k < g.size(); ++k) {
    if (std::isnan(g[k]) || std::isnan(w[k])) {
      if (std::isnan(g[k]) != std::isnan(w[k])) return false;
    } else if (std::isinf(g[k]) || std::isinf(w[k])) {
      if (g[k] != w[k]) return false;
    } else if (std::abs(g[k] - w[k]) > tol * (std::abs(w[k]) + 1.0)) {
      return false;
    }
  }
  return true;
}

TEST(DeviceSteps, RunOnDeviceBlocksWithoutHostCopies) {
  init_ops();
  testing::install_fake_cuda();
  const Registry& reg = Registry::get();
  std::set<std::string> stepped;  // ops whose device step ran
  int runs = 0;
  for (const std::string& name : reg.names()) {
    const OpDef& op = reg.find(name);
    bool any = false;
    for (const StepDef& sd : op.steps) any = any || sd.runs_on_device;
    if (!any || !op.samples) continue;
    uint64_t seed = 1;
    for (const Sample& s : op.samples()) {
      std::vector<Placements> pl(s.tensors.size(), Placements(1, Replicate()));
      const OpCall call = OpCall::bind(op, s.positional, s.keyword, s.tensors, pl, Shape{kWorld});
      const auto meta = call.op().meta(call);
      const std::vector<Tensor> globals = make_globals(call, ++seed);
      const std::vector<Tensor> want = run_single_device(call, globals);
      for (const Strategy& st : expand_strategies(call, meta, /*check_shardable=*/false)) {
        if (st.step() == 0 || !op.steps.at(st.step() - 1).runs_on_device) continue;
        const bool p2p_only = op.steps.at(st.step() - 1).point_to_point_only;
        for (bool device_groups : {true, false}) {
          const std::string where = absl::StrCat(call.str(), " strategy ", st.str(), " over ",
                                                 device_groups ? "device-memory groups" : "thread groups (host memory)");
          kernels::reset_host_fallback_counts();
          std::vector<std::vector<Tensor>> got(kWorld);
          run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
            if (device_groups) b = std::make_shared<testing::FakeDeviceBackend>(b);
            auto mesh = DeviceMesh::create(b, {kWorld}, {}, {}, kTimeout);
            std::vector<DTensor> inputs;
            for (int t = 0; t < call.num_tensors(); ++t) {
              DTensorSpec spec(mesh, st.inputs[t], call.tensor(t).shape, call.tensor(t).dtype);
              inputs.emplace_back(spec, adversarial_local_block(globals[t], spec.placements, mesh->shape(),
                                                                mesh->coordinate(), seed + t)
                                            .to(fake_cuda()));
            }
            const CommStats before = mesh->group(0).stats();
            std::vector<DTensor> outs = execute_strategy(call, st, meta, inputs, kTimeout);
            // A step marked point-to-point only must call nothing else (the thread groups'
            // collectives would stage its device blocks through host memory).
            for (int k = 0; p2p_only && k < kNumCommKinds; ++k) {
              if (static_cast<CommKind>(k) == CommKind::kSendRecv) continue;
              EXPECT_EQ(mesh->group(0).stats().calls_by_kind[k], before.calls_by_kind[k])
                  << where << ": a point-to-point-only step called " << comm_kind_name(static_cast<CommKind>(k));
            }
            for (DTensor& o : outs) {
              EXPECT_EQ(o.local_tensor().device(), fake_cuda()) << where;
              got[b->rank()].push_back(o.full_tensor(kTimeout).to(cpu()));
            }
          });
          // Over host-memory groups the step runs on host copies (fewer copies than staging each
          // collective), and says so; a point-to-point-only step's messages stay on the device over
          // thread groups too (ProcessGroup::p2p_moves).
          int64_t step_fallbacks = 0;
          for (auto& [n, k] : kernels::host_fallback_counts())
            if (n.find("(distributed step)") != std::string::npos) step_fallbacks += k;
          EXPECT_EQ(step_fallbacks, device_groups || p2p_only ? 0 : kWorld) << where;
          ASSERT_EQ(got[0].size(), want.size()) << where;
          for (size_t o = 0; o < want.size(); ++o)
            EXPECT_TRUE(close(got[0][o], want[o])) << where << ": output " << o << " " << got[0][o].str() << " want "
                                                   << want[o].str();
        }
        stepped.insert(name);
        ++runs;
      }
    }
  }
  // The softmax statistics, every scan's carry exchange, the candidate gather, the pooling halo
  // exchange, ring attention (forward and backward), loss parallel and the radix select at least.
  for (const char* op : {"softmax", "log_softmax", "logsumexp", "cross_entropy", "cumsum", "cumprod", "logcumsumexp", "cummax",
                         "cummin", "max.dim", "min.dim", "argmax", "argmin", "avg_pool2d", "max_pool2d_with_indices",
                         "scaled_dot_product_attention", "_scaled_dot_product_attention_backward", "median",
                         "nanmedian", "median.dim", "nanmedian.dim", "kthvalue"})
    EXPECT_TRUE(stepped.count(op)) << op;
  EXPECT_GT(runs, 0);
}

}  // namespace
}  // namespace dtensor
