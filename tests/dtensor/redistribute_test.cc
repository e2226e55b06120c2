// Redistribution on the threads backend: the property test of DESIGN §3 plus targeted plans.
#include <random>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/dtensor.h"
#include "gtest/gtest.h"
#include "tests/dtensor/redistribute_cases.h"

namespace dtensor {
namespace {

using testing::RedistCase;

// Runs fn(mesh) on every rank of a threads world shaped `mesh_shape`.
void on_mesh(const Shape& mesh_shape, const std::function<void(MeshPtr)>& fn) {
  run_threads(static_cast<int>(numel(mesh_shape)), [&](std::shared_ptr<Backend> b) {
    fn(DeviceMesh::create(b, mesh_shape));
  });
}

TEST(Redistribute, PropertyRandomCasesOnAllMeshes) {
  std::mt19937_64 rng(20261122);
  const std::vector<Shape> meshes = {{1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {2, 2}, {2, 3}, {2, 2, 2}};
  int cases = 0;
  for (const Shape& mesh : meshes) {
    // Several cases per world, so that thread start-up does not dominate.
    std::vector<RedistCase> batch;
    for (int i = 0; i < 150; ++i) batch.push_back(testing::random_case(rng, mesh));
    std::vector<std::string> failures(numel(mesh));
    on_mesh(mesh, [&](MeshPtr m) {
      for (const RedistCase& c : batch) {
        std::string err = testing::run_case(c, m);
        if (!err.empty() && failures[m->global_rank()].empty()) failures[m->global_rank()] = err;
      }
    });
    for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
    cases += static_cast<int>(batch.size());
  }
  EXPECT_EQ(cases, 1650);
}

// The same property with weighted shards (DESIGN §2) among the placements: weighted <-> even,
// weighted <-> other weights on the same dim and on other dims, nested, uneven and empty parts.
TEST(Redistribute, PropertyWeightedShardsOnAllMeshes) {
  std::mt19937_64 rng(20261125);
  const std::vector<Shape> meshes = {{1}, {2}, {3}, {4}, {2, 2}, {2, 3}, {2, 2, 2}};
  int weighted = 0;
  for (const Shape& mesh : meshes) {
    std::vector<RedistCase> batch;
    for (int i = 0; i < 150; ++i) batch.push_back(testing::random_case(rng, mesh, /*weighted=*/true));
    for (const auto& c : batch)
      for (size_t i = 0; i < mesh.size(); ++i) weighted += c.src[i].is_weighted() || c.dst[i].is_weighted();
    std::vector<std::string> failures(numel(mesh));
    on_mesh(mesh, [&](MeshPtr m) {
      for (const RedistCase& c : batch) {
        std::string err = testing::run_case(c, m);
        if (!err.empty() && failures[m->global_rank()].empty()) failures[m->global_rank()] = err;
      }
    });
    for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
  }
  EXPECT_GT(weighted, 300);
}

// Every src -> dst pair over {R, S(0), S(1), P(sum)} on the 2-d and 3-d meshes, uneven shapes.
TEST(Redistribute, ExhaustivePairsOnSmallMeshes) {
  const std::vector<Placement> opts = {Replicate(), Shard(0), Shard(1), Partial()};
  for (const Shape& mesh : std::vector<Shape>{{2, 3}, {2, 2, 2}}) {
    std::vector<Placements> all{{}};
    for (size_t i = 0; i < mesh.size(); ++i) {
      std::vector<Placements> next;
      for (const auto& p : all)
        for (const auto& o : opts) {
          Placements q = p;
          q.push_back(o);
          next.push_back(q);
        }
      all = next;
    }
    std::vector<RedistCase> batch;
    uint64_t seed = 1;
    for (const auto& s : all)
      for (const auto& d : all) batch.push_back({mesh, {5, 7}, DType::kFloat64, s, d, seed++});
    std::vector<std::string> failures(numel(mesh));
    on_mesh(mesh, [&](MeshPtr m) {
      for (const RedistCase& c : batch) {
        std::string err = testing::run_case(c, m);
        if (!err.empty() && failures[m->global_rank()].empty()) failures[m->global_rank()] = err;
      }
    });
    for (const auto& f : failures) EXPECT_TRUE(f.empty()) << f;
  }
}

TEST(Redistribute, PlansUseTheDesignedCollectives) {
  auto kinds = [](const Shape& mesh, Placements src, Placements dst, Shape shape) {
    auto plan = compute_redistribute_plan(mesh, src, dst, shape, DType::kFloat32);
    std::string s;
    for (const auto& st : plan.steps)
      absl::StrAppend(&s, s.empty() ? "" : ",", comm_kind_name(st.kind), "@", st.mesh_dim);
    return s;
  };
  EXPECT_EQ(kinds({4}, {Shard(0)}, {Replicate()}, {8, 8}), "all_gather@0");
  EXPECT_EQ(kinds({4}, {Partial()}, {Replicate()}, {8, 8}), "all_reduce@0");
  EXPECT_EQ(kinds({4}, {Partial()}, {Shard(1)}, {8, 8}), "reduce_scatter@0");
  EXPECT_EQ(kinds({4}, {Shard(0)}, {Shard(1)}, {8, 8}), "all_to_all@0");
  EXPECT_EQ(kinds({4}, {Replicate()}, {Shard(1)}, {8, 8}), "local@0");
  EXPECT_EQ(kinds({4}, {Shard(0)}, {Partial()}, {8, 8}), "all_gather@0,local@0");
  EXPECT_EQ(kinds({4}, {Partial(ReduceOp::kSum)}, {Partial(ReduceOp::kMax)}, {8, 8}),
            "all_reduce@0,local@0");
  // Nested shards: the inner shard must go before the outer one can, then comes back.
  EXPECT_EQ(kinds({2, 2}, {Shard(0), Shard(0)}, {Replicate(), Shard(0)}, {8, 8}),
            "all_gather@1,all_gather@0,local@1");
  // Local chunking first makes the all_gather move half the data.
  EXPECT_EQ(kinds({2, 2}, {Shard(0), Replicate()}, {Replicate(), Shard(1)}, {8, 8}),
            "local@1,all_gather@0");
  // Bytes: S(0)->R of a 16x16 float tensor over 4 ranks sends 3/4 of 1 KiB.
  auto plan = compute_redistribute_plan({4}, {Shard(0)}, {Replicate()}, {16, 16}, DType::kFloat32);
  EXPECT_EQ(plan.total_bytes(), 768);
  // Weighted: bytes are counted on the heaviest rank's block, wherever it sits.
  auto heavy_last = compute_redistribute_plan({2, 2}, {Shard(0, {1, 3}), Shard(1)}, {Shard(0, {1, 3}), Replicate()},
                                              {8, 8}, DType::kFloat32);
  auto heavy_first = compute_redistribute_plan({2, 2}, {Shard(0, {3, 1}), Shard(1)}, {Shard(0, {3, 1}), Replicate()},
                                               {8, 8}, DType::kFloat32);
  EXPECT_EQ(heavy_last.total_bytes(), heavy_first.total_bytes());
  EXPECT_EQ(heavy_first.total_bytes(), 6 * 8 * 4 / 2);  // 6 rows of 8 floats; all-gather sends half
}

TEST(Redistribute, PlansAreCachedAndTheCacheIsBounded) {
  on_mesh({2}, [](MeshPtr m) {
    DTensorSpec spec(m, {Shard(0)}, {6, 4}, DType::kFloat32);
    auto a = plan_redistribute(spec, {Replicate()});
    auto b = plan_redistribute(spec, {Replicate()});
    EXPECT_EQ(a.get(), b.get());
  });
  on_mesh({1}, [](MeshPtr m) {
    for (int64_t n = 0; n < static_cast<int64_t>(kPlanCacheCapacity) + 100; ++n) {
      DTensorSpec spec(m, {Shard(0)}, {n + 1}, DType::kFloat32);
      plan_redistribute(spec, {Replicate()});
    }
    EXPECT_LE(plan_cache_size(), kPlanCacheCapacity);
  });
}

// Reproducer of a flake: ranks that missed the cache at the same moment each kept the plan they had
// computed, so one rank could see two different plans for one key.
TEST(Redistribute, RanksRacingOnOneKeyShareOnePlan) {
  on_mesh({8}, [](MeshPtr m) {
    for (int64_t n = 1; n <= 300; ++n) {
      DTensorSpec shared(m, {Shard(1)}, {n, 7777}, DType::kFloat32);  // a fresh key, one for all ranks
      m->group(0).barrier();  // every rank misses the cache at the same moment
      auto a = plan_redistribute(shared, {Replicate()});
      auto b = plan_redistribute(shared, {Replicate()});
      ASSERT_EQ(a.get(), b.get()) << "key " << n;
    }
  });
}

TEST(Redistribute, CollectivesCountedPerMeshDim) {
  on_mesh({2, 2}, [](MeshPtr m) {
    Tensor x = Tensor::arange(64).view({8, 8});
    DTensor d = distribute_tensor(x, m, {Shard(0), Shard(1)});
    EXPECT_EQ(m->stats().calls, 0);  // distribute_tensor is local
    Tensor full = d.full_tensor();
    EXPECT_TRUE(equal(full, x));
    EXPECT_EQ(m->group(0).stats().calls, 1);
    EXPECT_EQ(m->group(1).stats().calls, 1);
  });
}

TEST(Redistribute, ChunkSemanticsMatchTorchChunk) {
  // 10 over 4 -> 3,3,3,1; 5 over 4 -> 2,2,1,0.
  std::vector<int64_t> a, b;
  for (int r = 0; r < 4; ++r) {
    a.push_back(chunk_range(10, 4, r).second);
    b.push_back(chunk_range(5, 4, r).second);
  }
  EXPECT_EQ(a, (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(b, (std::vector<int64_t>{2, 2, 1, 0}));
  on_mesh({4}, [](MeshPtr m) {
    DTensor d = distribute_tensor(Tensor::arange(5), m, {Shard(0)});
    const int64_t want[] = {2, 2, 1, 0};
    EXPECT_EQ(d.local_tensor().numel(), want[m->coordinate(0)]);
  });
}

TEST(WeightedShard, SizesFollowLargestRemainder) {
  auto sizes = [](int64_t n, std::vector<int64_t> w) {
    std::vector<int64_t> out;
    int64_t at = 0;
    for (size_t r = 0; r < w.size(); ++r) {
      auto [start, len] = weighted_range(n, w, static_cast<int64_t>(r));
      EXPECT_EQ(start, at);
      at += len;
      out.push_back(len);
    }
    EXPECT_EQ(at, n);
    return out;
  };
  // 10 by 3:2:2:1 (W = 8): floors 3,2,2,1 (sum 8), remainders 6,4,4,2: the 2 left go to ranks 0, 1.
  EXPECT_EQ(sizes(10, {3, 2, 2, 1}), (std::vector<int64_t>{4, 3, 2, 1}));
  // Equal weights: 10 over 4 -> 3,3,2,2 (ties to the lower rank), unlike torch.chunk's 3,3,3,1.
  EXPECT_EQ(sizes(10, {1, 1, 1, 1}), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(sizes(0, {3, 1}), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(sizes(1, {1, 3}), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(sizes(8, {3, 1}), (std::vector<int64_t>{6, 2}));
  // Notation, and weights kept divided by their gcd.
  EXPECT_EQ(Shard(0, {3, 2, 2, 1}).str(), "S(0)[3:2:2:1]");
  EXPECT_EQ(Shard(1, {6, 2}), Shard(1, {3, 1}));
  EXPECT_NE(Shard(1, {1, 1}), Shard(1));
  EXPECT_EQ(Placement::parse("S(0)[3:2:2:1]"), Shard(0, {3, 2, 2, 1}));
  EXPECT_EQ(Placement::parse(" Shard(1)[ 2 : 1 ] "), Shard(1, {2, 1}));
  for (const char* bad : {"S(0)[3:0]", "S(0)[3:-1]", "S(0)[a:1]", "S(0)[]", "R[1:2]", "S(0)[1:2"})
    EXPECT_THROW(Placement::parse(bad), Error) << bad;
  // Placement stays small and trivially copyable for the even case's sake.
  static_assert(sizeof(Placement) == 8);
  static_assert(std::is_trivially_copyable_v<Placement>);
  on_mesh({2, 2}, [](MeshPtr m) {
    try {
      distribute_tensor(Tensor::zeros({4, 4}), m, {Shard(0, {1, 2, 3}), Replicate()});
      ADD_FAILURE() << "accepted 3 weights on a mesh dim of 2";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("has 3 weights"), std::string::npos) << e.what();
    }
    // Rank shares: dim 0 of 10 rows by 3:1 over mesh dim 0 -> 8 and 2 rows (7.5, 2.5: tie to rank 0).
    DTensor d = distribute_tensor(Tensor::arange(40).view({10, 4}), m, {Shard(0, {3, 1}), Shard(1)});
    EXPECT_EQ(d.local_tensor().size(0), m->coordinate(0) == 0 ? 8 : 2);
    EXPECT_TRUE(equal(d.full_tensor(), Tensor::arange(40).view({10, 4})));
  });
}

TEST(BadInput, PlacementsCountMustMatchMeshDims) {
  on_mesh({2, 2}, [](MeshPtr m) {
    try {
      distribute_tensor(Tensor::zeros({4, 4}), m, {Shard(0)});
      ADD_FAILURE() << "accepted one placement on a 2-d mesh";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("1 placements [S(0)] for a 2-d mesh"), std::string::npos)
          << e.what();
    }
    DTensor d = distribute_tensor(Tensor::zeros({4, 4}), m, {Shard(0), Replicate()});
    EXPECT_THROW(d.redistribute({Replicate()}), Error);
  });
}

TEST(BadInput, ShardDimOutOfRange) {
  on_mesh({2}, [](MeshPtr m) {
    try {
      distribute_tensor(Tensor::zeros({4, 4}), m, {Shard(2)});
      ADD_FAILURE() << "accepted S(2) on a 2-d tensor";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("accepted: S(-2) to S(1)"), std::string::npos) << e.what();
    }
    DTensor d = distribute_tensor(Tensor::zeros({4, 4}), m, {Shard(-1)});
    EXPECT_EQ(d.placements()[0], Shard(1));
    EXPECT_THROW(d.redistribute({Shard(-3)}), Error);
  });
}

TEST(BadInput, TensorsOnDifferentMeshes) {
  run_threads(4, [](std::shared_ptr<Backend> b) {
    auto m1 = DeviceMesh::create(b, {4});
    auto m2 = DeviceMesh::create(b, {2, 2});
    DTensor x = distribute_tensor(Tensor::zeros({4}), m1, {Replicate()});
    DTensor y = distribute_tensor(Tensor::zeros({4}), m2, {Replicate(), Replicate()});
    try {
      check_same_mesh("add", x, y);
      ADD_FAILURE() << "different meshes accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("different meshes"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(check_same_mesh("add", x, x));
  });
}

TEST(BadInput, MixedPartialOpsAndWrongLocalShape) {
  on_mesh({2, 2}, [](MeshPtr m) {
    EXPECT_THROW(DTensorSpec(m, {Partial(ReduceOp::kSum), Partial(ReduceOp::kMax)}, {4}, DType::kFloat32),
                 Error);
    EXPECT_THROW(from_local(Tensor::zeros({3}), m, {Shard(0), Replicate()}, Shape{4}), Error);
    DTensor ok = from_local(Tensor::zeros({3}), m, {Shard(0), Replicate()});
    EXPECT_EQ(ok.shape(), (Shape{6}));
  });
}

TEST(BadInput, PlacementParsing) {
  EXPECT_EQ(Placement::parse("S(1)"), Shard(1));
  EXPECT_EQ(Placement::parse("Shard(-1)"), Shard(-1));
  EXPECT_EQ(Placement::parse("R"), Replicate());
  EXPECT_EQ(Placement::parse("P(max)"), Partial(ReduceOp::kMax));
  EXPECT_EQ(Placement::parse("Partial()"), Partial());
  EXPECT_THROW(Placement::parse("S(x)"), Error);
  EXPECT_THROW(Placement::parse("P(prod)"), Error);
  EXPECT_THROW(Placement::parse("Q"), Error);
}

TEST(DeviceMeshTest, CoordinatesGroupsAndSubmeshes) {
  run_threads(8, [](std::shared_ptr<Backend> b) {
    auto m = DeviceMesh::create(b, {2, 4}, {"dp", "tp"});
    int r = b->rank();
    EXPECT_EQ(m->coordinate(0), r / 4);
    EXPECT_EQ(m->coordinate(1), r % 4);
    EXPECT_EQ(m->group(1).global_ranks(), (std::vector<int>{r / 4 * 4, r / 4 * 4 + 1, r / 4 * 4 + 2, r / 4 * 4 + 3}));
    EXPECT_EQ(m->group(0).global_ranks(), (std::vector<int>{r % 4, r % 4 + 4}));
    auto tp = m->submesh({"tp"});
    EXPECT_EQ(tp->shape(), (Shape{4}));
    EXPECT_EQ(&tp->group(0), &m->group(1));
    EXPECT_EQ(tp->ranks()[0], r / 4 * 4);
    EXPECT_THROW(m->dim_index("pp"), Error);
    // A mesh over a subset of the world: outsiders hold empty blocks.
    auto half = DeviceMesh::create(b, {2}, {}, {0, 1});
    EXPECT_EQ(half->contains_me(), r < 2);
    DTensor d = distribute_tensor(Tensor::arange(6), half, {Shard(0)});
    EXPECT_EQ(d.local_tensor().numel(), r < 2 ? 3 : 0);
  });
}

}  // namespace
}  // namespace dtensor
