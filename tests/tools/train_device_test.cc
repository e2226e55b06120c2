// `dtensor train --device cuda` without a GPU: the whole training step (parameters, activations,
// gradients and AdamW state on the device, tensor parallelism over thread ranks) on the fake device
// of tests/testing/fake_device.h gives the cpu run's losses, and a bad --device names what is
// accepted. On a GPU, `dtensor train --device cuda --check` runs the CUDA kernels themselves.
#include <set>

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "kernels/device_dispatch.h"
#include "tests/testing/fake_device.h"
#include "tools/train.h"

namespace dtensor::tools {
namespace {

TrainOptions small(const std::string& device) {
  TrainOptions o;
  o.mesh = "tp=2";
  o.steps = 3;
  o.batch = 2;
  o.seq = 16;
  o.dim = 32;
  o.heads = 2;
  o.layers = 1;
  o.sample_chars = 4;
  o.device = device;
  return o;
}

std::vector<double> losses(const TrainOptions& o) {
  std::vector<double> r;
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    TrainResult mine = train_rank(b, o, nullptr);
    if (b->rank() == 0) r = mine.losses;
  });
  return r;
}

TEST(TrainDevice, FakeDeviceRunMatchesCpu) {
  testing::install_fake_cuda();
  TrainOptions sp = small("cuda");
  sp.sequence_parallel = true;
  sp.loss_parallel = true;
  for (const TrainOptions& o : {small("cuda"), sp}) {
    TrainOptions c = o;
    c.device = "cpu";
    std::vector<double> want = losses(c);
    kernels::reset_host_fallback_counts();
    std::vector<double> got = losses(o);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6 * std::abs(want[i])) << "step " << i;
    EXPECT_FALSE(kernels::host_fallback_counts().empty());  // no CUDA kernels linked: all on the host
  }
}

// What the default model (and its sequence- and loss-parallel variant) runs on a device: on the fake
// device every kernel falls back to the host, so the fallback list names every kernel function the
// training step calls. Each must have a device slot in kernels/kernel_list.h, which
// kernels/cuda/register.cc fills with a CUDA kernel for every entry (a missing one does not
// compile), and none may be a distributed step on host copies or a slot whose CUDA adapter sends
// some cases back to the host (pooling). So with //kernels/cuda linked, `dtensor train --device
// cuda` leaves the device for no kernel. The context-parallel mesh (cp=2, ring attention over thread
// ranks) is among them: its block exchange stays on the device.
TEST(TrainDevice, DefaultModelCallsOnlyKernelsWithACudaVersion) {
  testing::install_fake_cuda();
#define DT_LISTED_NAME(slot, function, type) #function,
  const std::set<std::string> listed = {DT_KERNEL_LIST(DT_LISTED_NAME)};
#undef DT_LISTED_NAME
  const std::set<std::string> partly_on_host = {"avg_pool", "avg_pool_backward", "max_pool_with_indices",
                                                "max_pool_backward"};
  TrainOptions sp = small("cuda");
  sp.sequence_parallel = true;
  sp.loss_parallel = true;
  TrainOptions cp = small("cuda");
  cp.mesh = "cp=2";
  for (const TrainOptions& o : {small("cuda"), sp, cp}) {
    kernels::reset_host_fallback_counts();
    losses(o);
    const auto calls = kernels::host_fallback_counts();
    EXPECT_GT(calls.size(), 5u);  // the step's kernels were seen (mm, layer_norm, attention, ...)
    for (auto& [name, n] : calls) {
      EXPECT_TRUE(listed.count(name)) << name << " (x" << n << ") has no device slot: it runs on the host";
      EXPECT_FALSE(partly_on_host.count(name)) << name << " (x" << n << ") falls back to the host in some cases";
    }
  }
}

TEST(TrainDevice, BadDeviceNamesTheAcceptedOnes) {
  try {
    parse_device("gpu", "threads");
    ADD_FAILURE() << "--device gpu accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu, cuda, cuda:N"), std::string::npos) << e.what();
  }
  EXPECT_EQ(parse_device("cpu", "threads"), cpu());
  testing::install_fake_cuda();
  EXPECT_EQ(parse_device("cuda:1", "threads"), (Device{DeviceType::kCUDA, 1}));
  EXPECT_EQ(parse_device("cuda", "threads"), (Device{DeviceType::kCUDA, 0}));
}

}  // namespace
}  // namespace dtensor::tools
