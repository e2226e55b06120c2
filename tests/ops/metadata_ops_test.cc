// The size queries and _local_scalar_dense (ops/metadata/) through call_op on 4 thread ranks, meshes
// of 1 to 3 dims: the answers are the global tensor's, computed by hand (sizes [5, 3], contiguous
// strides [3, 1], 15 elements, offset 0), whatever self's placement (uneven Shards, Replicate,
// Partial); a size query moves no data (no collective); .item() of a Partial or Shard one-element
// tensor is the reduced / gathered value; bad dims and non-scalar reads fail naming the op and shape.
#include <string>

#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"

namespace dtensor {
namespace {

constexpr int kWorld = 4;

int64_t int_answer(const DTensor& d) {
  EXPECT_EQ(d.shape(), Shape{});
  for (const Placement& p : d.placements()) EXPECT_TRUE(p.is_replicate()) << d.str();
  return static_cast<int64_t>(d.local_tensor().item());
}

struct Layout {
  Shape mesh;
  Placements placements;
};

// [5, 3] over 4 ranks: 5 and 3 split unevenly over 2 and 4; Partial pieces hold different values.
const Layout kLayouts[] = {
    {{4}, {Shard(0)}},
    {{4}, {Shard(1)}},  // 3 over 4: one rank's block is empty
    {{4}, {Replicate()}},
    {{4}, {Partial()}},
    {{2, 2}, {Shard(0), Shard(1)}},
    {{2, 2}, {Partial(), Shard(0)}},
    {{2, 2}, {Replicate(), Partial(ReduceOp::kMax)}},
    {{2, 1, 2}, {Shard(1), Replicate(), Shard(1)}},
    {{2, 1, 2}, {Partial(ReduceOp::kAvg), Replicate(), Shard(0)}},
};

TEST(MetadataOps, SizeQueriesGiveTheGlobalAnswersWithoutMovingData) {
  const Tensor x = random_tensor({5, 3}, DType::kFloat64, 1);
  for (const Layout& l : kLayouts) {
    run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
      auto mesh = DeviceMesh::create(b, l.mesh);
      DTensor d = distribute_tensor(x, mesh, l.placements);
      const int64_t before = mesh->stats().calls;
      const std::string where = d.str();
      EXPECT_EQ(int_answer(call_op1("sym_size.int", {d, IValue(int64_t{0})})), 5) << where;
      EXPECT_EQ(int_answer(call_op1("sym_size.int", {d, IValue(int64_t{1})})), 3) << where;
      EXPECT_EQ(int_answer(call_op1("sym_size.int", {d, IValue(int64_t{-2})})), 5) << where;
      EXPECT_EQ(int_answer(call_op1("sym_stride.int", {d, IValue(int64_t{0})})), 3) << where;
      EXPECT_EQ(int_answer(call_op1("sym_stride.int", {d, IValue(int64_t{-1})})), 1) << where;
      EXPECT_EQ(int_answer(call_op1("sym_numel", {d})), 15) << where;
      EXPECT_EQ(int_answer(call_op1("sym_storage_offset", {d})), 0) << where;
      DTensor c = call_op1("sym_is_contiguous", {d});
      EXPECT_EQ(c.dtype(), DType::kBool);
      EXPECT_EQ(int_answer(c), 1) << where;
      EXPECT_EQ(mesh->stats().calls, before) << "a size query communicated: " << where;
      // The blocks are not the whole: answers read from them would differ.
      if (!l.placements[0].is_replicate() && !l.placements[0].is_partial()) {
        EXPECT_LT(numel(d.local_tensor().sizes()), 15) << where;
      }
    });
  }
}

TEST(MetadataOps, ContiguityInMemoryFormatsAndSizeZeroStrides) {
  run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2, 2});
    auto is_contiguous = [&](Shape s, const char* format) {
      DTensor d = distribute_tensor(Tensor::zeros(s), mesh, {Shard(0), Replicate()});
      return int_answer(call_op1("sym_is_contiguous", {d}, {{"memory_format", IValue(std::string(format))}}));
    };
    // Contiguous strides of [2, 1, 3, 3] are [9, 9, 3, 1]: channels-last order C (size 1), W (1),
    // H (3), N (9) holds; [2, 3, 4, 4]'s C has stride 16, not 1.
    EXPECT_EQ(is_contiguous({2, 1, 3, 3}, "channels_last"), 1);
    EXPECT_EQ(is_contiguous({2, 3, 4, 4}, "channels_last"), 0);
    EXPECT_EQ(is_contiguous({2, 3, 4, 4}, "contiguous_format"), 1);
    EXPECT_EQ(is_contiguous({2, 3, 4, 4}, "preserve_format"), 1);  // torch reads it as contiguous_format
    EXPECT_EQ(is_contiguous({2, 3, 4}, "channels_last"), 0);  // not 4-d
    EXPECT_EQ(is_contiguous({2, 1, 3, 1, 1}, "channels_last_3d"), 1);
    // A size-0 dim strides as a size-1 one (torch: empty(2, 0, 3).stride() == (3, 3, 1)).
    DTensor e = distribute_tensor(Tensor::zeros({2, 0, 3}), mesh, {Shard(0), Shard(2)});
    EXPECT_EQ(int_answer(call_op1("sym_stride.int", {e, IValue(int64_t{0})})), 3);
    EXPECT_EQ(int_answer(call_op1("sym_numel", {e})), 0);
    try {
      call_op1("sym_is_contiguous", {e}, {{"memory_format", IValue(std::string("sideways"))}});
      ADD_FAILURE() << "memory_format 'sideways' accepted";
    } catch (const Error& err) {
      EXPECT_NE(std::string(err.what()).find("accepted: contiguous_format, channels_last"), std::string::npos)
          << err.what();
    }
  });
}

TEST(MetadataOps, BadDimsNameTheOpAndShape) {
  run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {4});
    DTensor d = distribute_tensor(Tensor::zeros({5, 3}), mesh, {Shard(0)});
    for (const char* op : {"sym_size.int", "sym_stride.int"}) {
      try {
        call_op1(op, {d, IValue(int64_t{2})});
        ADD_FAILURE() << op << " dim 2 of a 2-d tensor accepted";
      } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find(op), std::string::npos) << m;
        EXPECT_NE(m.find("dim 2 out of range for a 2-d tensor [5, 3]; accepted: [-2, 1]"), std::string::npos) << m;
      }
    }
    DTensor s = distribute_tensor(Tensor::zeros({}), mesh, {Replicate()});
    EXPECT_THROW(call_op1("sym_size.int", {s, IValue(int64_t{0})}), Error);  // a 0-d tensor has no dims
    EXPECT_EQ(int_answer(call_op1("sym_numel", {s})), 1);
  });
}

TEST(MetadataOps, LocalScalarDenseReducesAndGathersFirst) {
  run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
    const int r = b->rank();
    auto m1 = DeviceMesh::create(b, {4});
    // Partial(sum) pieces 1, 2, 3, 4: the value is 10 on every rank.
    DTensor p = from_local(Tensor::full({}, r + 1.0, DType::kFloat64), m1, {Partial()});
    DTensor v = call_op1("_local_scalar_dense", {p});
    EXPECT_EQ(v.shape(), Shape{});
    EXPECT_EQ(v.dtype(), DType::kFloat64);
    EXPECT_TRUE(v.placements()[0].is_replicate());
    EXPECT_EQ(v.local_tensor().item(), 10.0);
    // [1, 1] sharded over 4 ranks: rank 0 holds the element, the others empty blocks.
    DTensor s = distribute_tensor(Tensor::full({1, 1}, 7.0, DType::kInt64), m1, {Shard(0)});
    EXPECT_EQ(call_op1("_local_scalar_dense", {s}).local_tensor().item(), 7.0);
    // 2-d mesh: Partial(sum) pieces 5 and -1, sharded over the other mesh dim (one block empty).
    auto m2 = DeviceMesh::create(b, {2, 2});
    const auto c2 = m2->coordinate();
    DTensor q = from_local(Tensor::full({c2[1] == 0 ? 1 : 0}, c2[0] == 1 ? 5.0 : -1.0), m2, {Partial(), Shard(0)},
                           Shape{1});
    EXPECT_EQ(call_op1("_local_scalar_dense", {q}).local_tensor().item(), 4.0);
    // 3-d mesh: Partial(max) over two mesh dims, pieces 0, 1, 2, 3.
    auto m3 = DeviceMesh::create(b, {2, 1, 2});
    const auto c3 = m3->coordinate();
    DTensor w = from_local(Tensor::full({1, 1}, 2.0 * c3[0] + c3[2]), m3,
                           {Partial(ReduceOp::kMax), Replicate(), Partial(ReduceOp::kMax)}, Shape{1, 1});
    EXPECT_EQ(call_op1("_local_scalar_dense", {w}).local_tensor().item(), 3.0);
    DTensor bad = distribute_tensor(Tensor::zeros({2, 3}), m1, {Shard(1)});
    try {
      call_op1("_local_scalar_dense", {bad});
      ADD_FAILURE() << "item() of 6 elements accepted";
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("_local_scalar_dense"), std::string::npos) << m;
      EXPECT_NE(m.find("a tensor [2, 3] with 6 elements cannot be converted to a Scalar; accepted: exactly one element"),
                std::string::npos) << m;
    }
  });
}

}  // namespace
}  // namespace dtensor
