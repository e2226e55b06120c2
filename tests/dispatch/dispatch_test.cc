// The op-call path on the threads backend: call_op over DTensors equals the single-device op.
#include "dispatch/dispatch.h"

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace dtensor {
namespace {

TEST(CallOp, TwoLayerMlpOnATwoDMeshMatchesSingleDevice) {
  Tensor x = random_tensor({6, 8}, DType::kFloat64, 1);
  Tensor w1 = random_tensor({8, 12}, DType::kFloat64, 2);
  Tensor w2 = random_tensor({12, 5}, DType::kFloat64, 3);
  Tensor want = kernels::sum(kernels::mm(kernels::relu(kernels::mm(x, w1)), w2), {1});
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2, 2});
    DTensor dx = distribute_tensor(x, mesh, {Shard(0), Replicate()});
    DTensor d1 = distribute_tensor(w1, mesh, {Replicate(), Shard(1)});
    DTensor d2 = distribute_tensor(w2, mesh, {Replicate(), Shard(0)});
    DTensor h = call_op1("relu", {call_op1("mm", {dx, d1})});
    EXPECT_EQ(h.placements(), (Placements{Shard(0), Shard(1)}));
    DTensor y = call_op1("mm", {h, d2});
    EXPECT_EQ(y.placements(), (Placements{Shard(0), Partial()}));
    DTensor s = call_op1("sum", {y, IValue(std::vector<int64_t>{1})});
    EXPECT_TRUE(allclose(s.full_tensor(), want, 1e-12, 1e-12));
  });
}

TEST(CallOp, MultipleOutputsListsAndKeywords) {
  Tensor x = random_tensor({7, 4}, DType::kFloat32, 4);
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    DTensor d = distribute_tensor(x, mesh, {Shard(1)});
    auto parts = call_op("split", {d, IValue(int64_t{3})}, {{"dim", IValue(int64_t{0})}});
    ASSERT_EQ(parts.size(), 3u);
    EXPECT_EQ(parts[2].shape(), (Shape{1, 4}));
    DTensor back = call_op1("cat", {std::vector<DTensor>{parts[0], parts[1], parts[2]}});
    EXPECT_TRUE(equal(back.full_tensor(), x));
  });
}

TEST(CallOp, BadInputNamesOpShapesAndPlacements) {
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto m1 = DeviceMesh::create(b, {4});
    auto m2 = DeviceMesh::create(b, {2, 2});
    DTensor a = distribute_tensor(Tensor::zeros({4, 4}), m1, {Shard(0)});
    DTensor c = distribute_tensor(Tensor::zeros({4, 4}), m2, {Shard(0), Replicate()});
    DTensor bad = distribute_tensor(Tensor::zeros({3, 4}), m1, {Replicate()});
    try {
      call_op1("add", {a, c});
      ADD_FAILURE() << "different meshes accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different meshes"), std::string::npos) << e.what();
    }
    try {
      call_op1("mm", {a, bad});
      ADD_FAILURE() << "mm of [4, 4] and [3, 4] accepted";
    } catch (const Error& e) {
      std::string m = e.what();
      EXPECT_NE(m.find("mm(float32[4, 4] [S(0)], float32[3, 4] [R])"), std::string::npos) << m;
      EXPECT_NE(m.find("accepted: self[n, k] @ mat2[k, m]"), std::string::npos) << m;
    }
    EXPECT_THROW(call_op1("softmax", {a}), Error);  // missing dim
    EXPECT_THROW(call_op1("nope", {a}), Error);
  });
}

}  // namespace
}  // namespace dtensor
