// call_factory (dispatch/factory.h): factory ops laid out over a mesh as the caller asks, each rank's
// block computed where it is (hand values: arange's elements, full's fill, the Philox draw's blocks
// against the one-device draw), uneven and empty blocks as torch.chunk gives them, a rank outside
// the mesh with an empty block, and the errors naming the call, the placements asked and those
// accepted.
#include "dispatch/factory.h"

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "kernels/cpu/random.h"

namespace dtensor {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(CallFactory, BlocksOfArangeFullAndRandOnATwoDMesh) {
  const Tensor draw = kernels::philox_uniform({5, 3}, {0, 0}, {5, 3}, 42, 7, DType::kFloat64);
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2, 2});
    // 10 elements under S(0), S(0) (nested torch.chunk: 5 and 5, then 3 and 2 each): 3, 2, 3, 2.
    DTensor a = call_factory("arange", {IValue(int64_t{-4}), IValue(int64_t{16}), IValue(int64_t{2})}, {}, mesh,
                             {Shard(0), Shard(0)})[0];
    EXPECT_EQ(a.dtype(), DType::kInt64);
    EXPECT_EQ(a.full_tensor().to_vector<int64_t>(), (std::vector<int64_t>{-4, -2, 0, 2, 4, 6, 8, 10, 12, 14}));
    const int64_t flat = mesh->coordinate()[0] * 2 + mesh->coordinate()[1];
    EXPECT_EQ(a.local_tensor().numel(), flat % 2 == 0 ? 3 : 2);
    // 5 rows: 3 and 2, then 2, 1 and 1, 1; float64 from the dtype argument.
    DTensor f = call_factory("full", {IValue(std::vector<int64_t>{5, 3}), IValue(2.5)},
                             {{"dtype", IValue(std::string("float64"))}}, mesh, {Shard(0), Shard(0)})[0];
    EXPECT_EQ(f.local_tensor().sizes(), (Shape{flat == 0 ? 2 : 1, 3}));
    // 3 elements over 4 blocks of S(0) on a flattened view: the last block is empty.
    DTensor e = call_factory("empty", {IValue(std::vector<int64_t>{3})}, {}, mesh, {Shard(0), Shard(0)})[0];
    EXPECT_EQ(e.local_tensor().numel(), flat == 3 ? 0 : 1);
    EXPECT_TRUE(equal(e.full_tensor(), Tensor::zeros({3})));
    EXPECT_TRUE(equal(f.full_tensor(), Tensor::full({5, 3}, 2.5, DType::kFloat64)));
    DTensor r = call_factory("rand", {IValue(std::vector<int64_t>{5, 3})},
                             {{"seed", IValue(int64_t{42})}, {"offset", IValue(int64_t{7})},
                              {"dtype", IValue(std::string("float64"))}},
                             mesh, {Replicate(), Shard(-1)})[0];
    EXPECT_EQ(r.placements(), (Placements{Replicate(), Shard(1)}));
    EXPECT_TRUE(equal(r.full_tensor(), draw));
  });
}

TEST(CallFactory, ARankOutsideTheMeshGetsAnEmptyBlock) {
  run_threads(3, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2}, {}, {0, 1});
    DTensor a = call_factory("arange", {IValue(int64_t{6})}, {}, mesh, {Shard(0)})[0];
    EXPECT_EQ(a.local_tensor().numel(), b->rank() == 2 ? 0 : 3);
  });
}

TEST(CallFactory, ErrorsNameTheCallAndWhatIsAccepted) {
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2, 2});
    const std::vector<IValue> size{IValue(std::vector<int64_t>{5})};
    const std::vector<std::pair<std::string, IValue>> key{{"seed", IValue(int64_t{1})}, {"offset", IValue(int64_t{0})}};
    EXPECT_NE(error_of([&] { call_factory("randperm", {IValue(int64_t{5})}, key, mesh, {Partial(), Replicate()}); })
                  .find("output int64[5] asked as [P(sum), R]; a factory's output cannot be Partial"),
              std::string::npos);
    EXPECT_NE(error_of([&] { call_factory("rand", size, key, mesh, {Shard(1), Replicate()}); })
                  .find("Shard(1) of a 1-d output, which has no dim 1"),
              std::string::npos);
    EXPECT_NE(error_of([&] { call_factory("rand", size, key, mesh, {Shard(0, std::vector<int64_t>{3, 1}), Replicate()}); })
                  .find("accepted: [S(0), S(0)], [S(0), R], [R, S(0)], [R, R]"),
              std::string::npos);
    EXPECT_NE(error_of([&] { call_factory("scalar_tensor", {IValue(1.0)}, {}, mesh, {Shard(0), Replicate()}); })
                  .find("Shard(0) of a 0-d output"),
              std::string::npos);
    EXPECT_NE(error_of([&] { call_factory("full", {IValue(std::vector<int64_t>{2, -3}), IValue(1.0)}, {}, mesh,
                                          {Replicate(), Replicate()}); })
                  .find("full(size=[2, -3], fill_value=1) on mesh [2, 2]: size [2, -3] has a negative size"),
              std::string::npos);
    EXPECT_NE(error_of([&] { call_factory("arange.start_step", {IValue(int64_t{0}), IValue(int64_t{3}), IValue(int64_t{0})},
                                          {}, mesh, {Replicate(), Replicate()}); })
                  .find("step must be nonzero"),
              std::string::npos);
    EXPECT_NE(error_of([&] { call_factory("relu", size, {}, mesh, {Replicate(), Replicate()}); })
                  .find("so it is no factory"),
              std::string::npos);
  });
}

}  // namespace
}  // namespace dtensor
