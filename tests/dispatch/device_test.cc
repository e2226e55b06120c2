// The device plumbing without a GPU, on the fake device of tests/testing/fake_device.h ("cuda"
// memory that is host memory with every byte inverted, so any direct access gives garbage): core
// copies, the kernels' host fallback, the op-call path with redistribution and distributed steps on
// device tensors over thread ranks, autograd. Every result is checked against the same computation
// on cpu tensors. (The GPU kernels themselves are tested in tests/cuda, on a GPU.)
#include "autograd/functional.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "kernels/device_dispatch.h"
#include "tests/testing/fake_device.h"

namespace dtensor {
namespace {

using testing::fake_cuda;

class DeviceTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::install_fake_cuda(); }
};

int64_t fallbacks_of(const std::string& name) {
  for (auto& [n, c] : kernels::host_fallback_counts())
    if (n == name) return c;
  return 0;
}

TEST_F(DeviceTest, CoreCopiesGoThroughTheDeviceCopy) {
  Tensor x = random_tensor({5, 7}, DType::kFloat32, 1);
  Tensor d = x.to(fake_cuda());
  EXPECT_EQ(d.device(), fake_cuda());
  // The bytes really are encoded: a raw read does not see x.
  EXPECT_NE(std::memcmp(d.data_ptr(), x.data_ptr(), x.nbytes()), 0);
  EXPECT_TRUE(equal(d.to(cpu()), x));
  EXPECT_TRUE(equal(d, x));  // equal() compares on the host
  // Strided device views: transpose + contiguous, clone, dtype casts, item, to_vector.
  Tensor t = d.transpose(0, 1).contiguous();
  EXPECT_EQ(t.device(), fake_cuda());
  EXPECT_TRUE(equal(t.to(cpu()), x.transpose(0, 1).contiguous()));
  EXPECT_TRUE(equal(d.to(DType::kFloat64).to(cpu()), x.to(DType::kFloat64)));
  EXPECT_EQ(d.narrow(0, 2, 1).narrow(1, 3, 1).item(), x.narrow(0, 2, 1).narrow(1, 3, 1).item());
  EXPECT_EQ(d.to_vector<float>(), x.to_vector<float>());
  // Creation on the device; fill_ of a view writes only the view.
  EXPECT_EQ(Tensor::zeros({3}, DType::kFloat32, fake_cuda()).to_vector<float>(), (std::vector<float>{0, 0, 0}));
  Tensor f = Tensor::full({2, 3}, 2.5, DType::kFloat64, fake_cuda());
  f.narrow(1, 1, 1).fill_(-1);
  EXPECT_EQ(f.to_vector<double>(), (std::vector<double>{2.5, -1, 2.5, 2.5, -1, 2.5}));
  // cat of device tensors stays on the device.
  Tensor c = cat({d, d.narrow(0, 0, 2)}, 0);
  EXPECT_EQ(c.device(), fake_cuda());
  EXPECT_TRUE(equal(c.to(cpu()), cat({x, x.narrow(0, 0, 2)}, 0)));
}

TEST_F(DeviceTest, CopyWithoutADeviceCopyNamesTheLibrary) {
  Tensor d = Tensor::zeros({2}, DType::kFloat32, fake_cuda());
  DeviceCopyFn saved = register_device_copy(DeviceType::kCUDA, nullptr);
  try {
    d.to(cpu());
    ADD_FAILURE() << "copy without a registered device copy accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("//kernels/cuda"), std::string::npos) << e.what();
  }
  register_device_copy(DeviceType::kCUDA, saved);
}

TEST_F(DeviceTest, KernelsWithoutADeviceVersionRunOnHostCopies) {
  kernels::reset_host_fallback_counts();
  Tensor a = random_tensor({6, 8}, DType::kFloat32, 2), b = random_tensor({8, 5}, DType::kFloat32, 3);
  Tensor da = a.to(fake_cuda()), db = b.to(fake_cuda());
  Tensor mm = kernels::mm(da, db);
  EXPECT_EQ(mm.device(), fake_cuda());
  EXPECT_TRUE(equal(mm.to(cpu()), kernels::mm(a, b)));
  auto [v, i] = kernels::max_dim(da, 1);
  auto [wv, wi] = kernels::max_dim(a, 1);
  EXPECT_EQ(v.device(), fake_cuda());
  EXPECT_TRUE(equal(v.to(cpu()), wv));
  EXPECT_TRUE(equal(i.to(cpu()), wi));
  EXPECT_TRUE(equal(kernels::cumsum(da, 0).to(cpu()), kernels::cumsum(a, 0)));
  EXPECT_TRUE(equal(kernels::add(da, 1.5).to(cpu()), kernels::add(a, 1.5)));
  EXPECT_TRUE(equal(kernels::layer_norm(da, {8}, std::nullopt, std::nullopt, 1e-5).to(cpu()),
                    kernels::layer_norm(a, {8}, std::nullopt, std::nullopt, 1e-5)));
  EXPECT_EQ(fallbacks_of("mm"), 1);
  EXPECT_EQ(fallbacks_of("max_dim"), 1);
  EXPECT_EQ(fallbacks_of("add"), 1);
  // cpu tensors never count.
  kernels::mm(a, b);
  EXPECT_EQ(fallbacks_of("mm"), 1);
}

TEST_F(DeviceTest, OpCallsRedistributeAndStepOnDeviceTensors) {
  Tensor x = random_tensor({6, 8}, DType::kFloat64, 4);
  Tensor w1 = random_tensor({8, 12}, DType::kFloat64, 5);
  Tensor w2 = random_tensor({12, 5}, DType::kFloat64, 6);
  Tensor want = kernels::sum(kernels::mm(kernels::relu(kernels::mm(x, w1)), w2), {1});
  Tensor want_scan = kernels::cumsum(x, 0);
  kernels::reset_host_fallback_counts();
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2, 2});
    DTensor dx = distribute_tensor(x.to(fake_cuda()), mesh, {Shard(0), Replicate()});
    DTensor d1 = distribute_tensor(w1.to(fake_cuda()), mesh, {Replicate(), Shard(1)});
    DTensor d2 = distribute_tensor(w2.to(fake_cuda()), mesh, {Replicate(), Shard(0)});
    DTensor y = call_op1("mm", {call_op1("relu", {call_op1("mm", {dx, d1})}), d2});
    EXPECT_EQ(y.placements(), (Placements{Shard(0), Partial()}));
    EXPECT_EQ(y.local_tensor().device(), fake_cuda());
    DTensor s = call_op1("sum", {y, IValue(std::vector<int64_t>{1})});
    // full_tensor: all_gather + all_reduce of device blocks through the threads backend.
    Tensor got = s.full_tensor();
    EXPECT_EQ(got.device(), fake_cuda());
    EXPECT_TRUE(allclose(got.to(cpu()), want, 1e-12, 1e-12));
    // S(0) -> S(1) (all_to_all) on device blocks.
    DTensor t = dx.redistribute({Shard(1), Replicate()});
    EXPECT_TRUE(equal(t.full_tensor().to(cpu()), x));
    // cumsum along the sharded dim keeps it sharded: the carry exchange runs on host copies.
    DTensor c = call_op1("cumsum", {dx, IValue(int64_t{0})});
    EXPECT_EQ(c.placements()[0], Shard(0));
    EXPECT_EQ(c.local_tensor().device(), fake_cuda());
    EXPECT_TRUE(allclose(c.full_tensor().to(cpu()), want_scan, 1e-12, 1e-12));
  });
  EXPECT_GT(fallbacks_of("cumsum (distributed step)"), 0);
  EXPECT_GT(fallbacks_of("mm"), 0);
}

TEST_F(DeviceTest, MixedDevicesNameTheOpAndTheDevices) {
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    DTensor a = distribute_tensor(Tensor::zeros({4, 4}).to(fake_cuda()), mesh, {Shard(0)});
    DTensor c = distribute_tensor(Tensor::zeros({4, 4}), mesh, {Shard(0)});
    try {
      call_op1("add", {a, c});
      ADD_FAILURE() << "add of cuda and cpu blocks accepted";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("add"), std::string::npos) << m;
      EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
      EXPECT_NE(m.find("cpu"), std::string::npos) << m;
    }
  });
}

TEST_F(DeviceTest, BackwardOnDeviceMatchesCpu) {
  Tensor x = random_tensor({4, 6}, DType::kFloat64, 7), w = random_tensor({6, 3}, DType::kFloat64, 8);
  auto grads = [&](Device dev) {
    std::vector<Tensor> out(2);
    run_threads(2, [&](std::shared_ptr<Backend> b) {
      auto mesh = DeviceMesh::create(b, {2});
      DTensor dx = distribute_tensor(x.to(dev), mesh, {Shard(0)});
      DTensor dw = distribute_tensor(w.to(dev), mesh, {Shard(1)});
      set_requires_grad(dx);
      set_requires_grad(dw);
      DTensor loss = F::sum(F::mul(F::softmax(F::mm(dx, dw), 1), F::mm(dx, dw)));
      backward(loss);
      Tensor gx = grad(dx)->full_tensor(), gw = grad(dw)->full_tensor();
      EXPECT_EQ(gx.device(), dev);
      if (b->rank() == 0) out = {gx.to(cpu()), gw.to(cpu())};
    });
    return out;
  };
  auto on_cpu = grads(cpu()), on_device = grads(fake_cuda());
  EXPECT_TRUE(allclose(on_device[0], on_cpu[0], 1e-12, 1e-12));
  EXPECT_TRUE(allclose(on_device[1], on_cpu[1], 1e-12, 1e-12));
}

}  // namespace
}  // namespace dtensor
