// The autograd engine itself: accumulation, no-grad scopes, differentiable redistribution and
// functional collectives, and the to_local / from_local crossings (DESIGN §5).
#include "autograd/functional.h"

#include <tuple>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace dtensor {
namespace {

TEST(Autograd, LeafGradientsAccumulateAndFollowLeafPlacements) {
  Tensor x = random_tensor({4, 6}, DType::kFloat64, 1);
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    DTensor d = distribute_tensor(x, mesh, {Shard(0)});
    set_requires_grad(d);
    // loss = sum(2 x) + sum(x * x): grad = 2 + 2x, accumulated over two backward calls.
    for (int i = 0; i < 2; ++i) {
      DTensor loss = F::add(F::sum(F::mul(d, 2.0)), F::sum(F::mul(d, d)));
      backward(loss);
    }
    ASSERT_TRUE(grad(d).has_value());
    EXPECT_EQ(grad(d)->placements(), (Placements{Shard(0)}));
    Tensor want = kernels::mul(kernels::add(kernels::mul(x, 2.0), 2.0), 2.0);
    EXPECT_TRUE(allclose(grad(d)->full_tensor(), want, 1e-12, 1e-12));
    zero_grad(d);
    EXPECT_FALSE(grad(d).has_value());
  });
}

TEST(Autograd, NoGradScopesRecordNothing) {
  run_threads(1, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {1});
    DTensor d = distribute_tensor(Tensor::full({3}, 1.0, DType::kFloat64), mesh, {Replicate()});
    set_requires_grad(d);
    NoGradGuard ng;
    DTensor y = F::mul(d, 3.0);
    EXPECT_FALSE(requires_grad(y));
    EXPECT_THROW(backward(F::sum(y)), Error);
  });
}

TEST(Autograd, RedistributeBackwardGoesBackToTheSource) {
  Tensor x = random_tensor({6, 4}, DType::kFloat64, 2);
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2, 2});
    DTensor d = distribute_tensor(x, mesh, {Shard(0), Shard(1)});
    set_requires_grad(d);
    DTensor r = redistribute(d, {Replicate(), Shard(0)});
    backward(F::sum(F::mul(r, r)));
    EXPECT_EQ(grad(d)->placements(), (Placements{Shard(0), Shard(1)}));
    EXPECT_TRUE(allclose(grad(d)->full_tensor(), kernels::mul(x, 2.0), 1e-12, 1e-12));
    // A Partial source gets a Replicate gradient.
    DTensor p = distribute_tensor(x, mesh, {Partial(), Replicate()});
    set_requires_grad(p);
    backward(F::sum(redistribute(p, {Replicate(), Replicate()})));
    EXPECT_EQ(grad(p)->placements(), (Placements{Replicate(), Replicate()}));
    EXPECT_TRUE(allclose(grad(p)->full_tensor(), Tensor::full({6, 4}, 1.0, DType::kFloat64), 0, 0));
  });
}

// As in PyTorch, the methods are the differentiable forms: x.redistribute(...) and x.to_local()
// record backward nodes; redistribute_untracked and local_tensor() are the raw ones.
TEST(Autograd, DTensorMethodsAreDifferentiableByDefault) {
  Tensor x = random_tensor({4, 6}, DType::kFloat64, 3);
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    DTensor d = distribute_tensor(x, mesh, {Shard(0)});
    set_requires_grad(d);
    // loss = sum(3 * redistribute(x, R)) + sum(to_local(x)^2) over both ranks' blocks.
    DTensor r = d.redistribute({Replicate()});
    EXPECT_TRUE(requires_grad(r));
    DTensor local = d.to_local();
    EXPECT_TRUE(requires_grad(local));
    EXPECT_EQ(local.mesh()->size(), 1);
    DTensor part = F::sum(F::mul(local, local));  // this rank's share of the second term
    DTensor total = F::add(F::sum(F::mul(r, 3.0)), from_local(part, mesh, {Partial()}));
    backward(total);
    ASSERT_TRUE(grad(d).has_value());
    Tensor want = kernels::add(kernels::mul(x, 2.0), 3.0);  // 3 + 2x
    EXPECT_TRUE(allclose(grad(d)->full_tensor(), want, 1e-12, 1e-12));
    EXPECT_FALSE(requires_grad(d.redistribute_untracked({Replicate()})));
  });
}

TEST(Autograd, ToLocalAndFromLocalCarryTheGradientLayout) {
  Tensor x = random_tensor({8, 3}, DType::kFloat64, 3);
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    DTensor d = distribute_tensor(x, mesh, {Shard(0)});
    set_requires_grad(d);
    DTensor local = to_local(d);  // this rank's [4, 3] block, on its own one-rank mesh
    DTensor back = from_local(F::mul(local, 3.0), mesh, {Shard(0)});
    backward(F::sum(back));
    EXPECT_TRUE(allclose(grad(d)->full_tensor(), Tensor::full({8, 3}, 3.0, DType::kFloat64), 0, 0));
  });
}

TEST(Autograd, FunctionalCollectivesAreDifferentiable) {
  // Total loss = sum over ranks of sum(w_r * all_gather(x_r)): d/dx_r = reduce_scatter of the w's.
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    auto self = self_mesh(*mesh);
    const int r = b->rank();
    DTensor x = from_local(Tensor::full({2, 3}, r + 1.0, DType::kFloat64), self, {Replicate()});
    set_requires_grad(x);
    DTensor g = all_gather(x, *mesh, 0, 0);  // [4, 3]
    EXPECT_EQ(g.local_tensor().to_vector<double>()[6], 2.0);
    DTensor w = from_local(Tensor::full({4, 3}, r + 1.0, DType::kFloat64), self, {Replicate()});
    backward(F::sum(F::mul(g, w)));
    // Each rank's rows receive w_0 + w_1 = 1 + 2.
    EXPECT_TRUE(allclose(grad(x)->local_tensor(), Tensor::full({2, 3}, 3.0, DType::kFloat64), 0, 0));
    DTensor y = from_local(Tensor::full({4, 2}, r + 1.0, DType::kFloat64), self, {Replicate()});
    set_requires_grad(y);
    DTensor s = reduce_scatter(y, *mesh, 0, 0);  // [2, 2] of 1 + 2
    EXPECT_EQ(s.local_tensor().to_vector<double>()[0], 3.0);
    backward(F::sum(s));
    EXPECT_TRUE(allclose(grad(y)->local_tensor(), Tensor::full({4, 2}, 1.0, DType::kFloat64), 0, 0));
    DTensor z = from_local(Tensor::full({2, 4}, r + 1.0, DType::kFloat64), self, {Replicate()});
    set_requires_grad(z);
    DTensor a = all_to_all(z, *mesh, 0, 1, 0);  // split columns, gather rows: [4, 2]
    EXPECT_EQ(a.shape(), (Shape{4, 2}));
    backward(F::sum(F::mul(a, a)));
    EXPECT_TRUE(allclose(grad(z)->local_tensor(), Tensor::full({2, 4}, 2.0 * (r + 1), DType::kFloat64), 0, 0));
  });
}

}  // namespace
}  // namespace dtensor

namespace dtensor {
namespace {

// Every redistribution's backward: y = redistribute(x) is x as values, so d sum(y * W) / dx = W,
// laid out in x's placements (Replicate where x was Partial), on 1-d and 2-d meshes.
TEST(Autograd, EveryRedistributionBackwardIsTheIdentityOnValues) {
  const std::vector<Placement> opts = {Replicate(), Shard(0), Shard(1), Partial()};
  for (const Shape& mesh_shape : std::vector<Shape>{{2}, {3}, {2, 2}}) {
    std::vector<Placements> all{{}};
    for (size_t i = 0; i < mesh_shape.size(); ++i) {
      std::vector<Placements> next;
      for (const auto& p : all)
        for (const auto& o : opts) {
          Placements q = p;
          q.push_back(o);
          next.push_back(q);
        }
      all = next;
    }
    Tensor x = random_tensor({5, 3}, DType::kFloat64, 9), w = random_tensor({5, 3}, DType::kFloat64, 10);
    run_threads(static_cast<int>(numel(mesh_shape)), [&](std::shared_ptr<Backend> b) {
      auto mesh = DeviceMesh::create(b, mesh_shape);
      DTensor wd = distribute_tensor(w, mesh, Placements(mesh_shape.size(), Replicate()));
      for (const auto& src : all) {
        for (const auto& dst : all) {
          DTensor d(DTensorSpec(mesh, src, {5, 3}, DType::kFloat64),
                    adversarial_local_block(x, src, mesh_shape, mesh->coordinate(), 3));
          set_requires_grad(d);
          backward(F::sum(F::mul(redistribute(d, dst), wd)));
          Placements want = src;
          for (auto& p : want)
            if (p.is_partial()) p = Replicate();
          ASSERT_EQ(grad(d)->placements(), want) << placements_str(src) << " -> " << placements_str(dst);
          ASSERT_TRUE(allclose(grad(d)->full_tensor(), w, 1e-12, 1e-12))
              << placements_str(src) << " -> " << placements_str(dst);
        }
      }
    });
  }
}

// Weighted shards (DESIGN §2): mean(tanh(x @ w)) with x's rows split by weight over dp and w's columns
// over tp has the single-device gradients, and x's gradient keeps x's weighted placement. Also every
// redistribution between weighted, even and replicated placements has the identity backward.
TEST(Autograd, WeightedShardsDifferentiateAsTheSingleDeviceProgram) {
  Tensor x = random_tensor({7, 5}, DType::kFloat64, 21), w = random_tensor({5, 4}, DType::kFloat64, 22);
  auto grads = [&](const Shape& mesh_shape, const Placements& xp, const Placements& wp) {
    std::pair<Tensor, Tensor> out;
    run_threads(static_cast<int>(numel(mesh_shape)), [&](std::shared_ptr<Backend> b) {
      auto mesh = DeviceMesh::create(b, mesh_shape);
      DTensor xd = distribute_tensor(x, mesh, xp), wd = distribute_tensor(w, mesh, wp);
      set_requires_grad(xd);
      set_requires_grad(wd);
      backward(F::mean(F::tanh(F::mm(xd, wd))));
      EXPECT_EQ(grad(xd)->placements(), xp);
      Tensor gx = grad(xd)->full_tensor(), gw = grad(wd)->full_tensor();
      if (b->rank() == 0) out = {gx, gw};
    });
    return out;
  };
  auto want = grads({1}, {Replicate()}, {Replicate()});
  for (auto [mesh, xp, wp] : std::vector<std::tuple<Shape, Placements, Placements>>{
           {{2}, {Shard(0, {3, 1})}, {Replicate()}},
           {{3}, {Shard(1, {1, 2, 2})}, {Shard(0, {1, 2, 2})}},
           {{2, 2}, {Shard(0, {3, 1}), Replicate()}, {Replicate(), Shard(1)}},
           {{2, 2}, {Shard(0, {1, 4}), Shard(1, {2, 3})}, {Replicate(), Shard(0, {2, 3})}}}) {
    auto got = grads(mesh, xp, wp);
    EXPECT_TRUE(allclose(got.first, want.first, 1e-12, 1e-12)) << placements_str(xp);
    EXPECT_TRUE(allclose(got.second, want.second, 1e-12, 1e-12)) << placements_str(wp);
  }
  const std::vector<Placements> opts = {{Shard(0, {3, 1})}, {Shard(1, {1, 2})}, {Shard(0)}, {Replicate()},
                                        {Partial()}};
  Tensor v = random_tensor({5, 3}, DType::kFloat64, 23);
  run_threads(2, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {2});
    DTensor vd = distribute_tensor(v, mesh, {Replicate()});
    for (const auto& src : opts)
      for (const auto& dst : opts) {
        DTensor d(DTensorSpec(mesh, src, {5, 3}, DType::kFloat64),
                  adversarial_local_block(x.narrow(1, 0, 3).narrow(0, 0, 5).contiguous(), src, {2},
                                          mesh->coordinate(), 3));
        set_requires_grad(d);
        backward(F::sum(F::mul(redistribute(d, dst), vd)));
        ASSERT_TRUE(allclose(grad(d)->full_tensor(), v, 1e-12, 1e-12))
            << placements_str(src) << " -> " << placements_str(dst);
      }
  });
}

}  // namespace
}  // namespace dtensor

namespace dtensor {
namespace {

// all_to_all_v on 3 ranks with uneven splits (one empty), against the exchange worked out by hand:
// rank r's row j holds 10 r + j; send splits r0 [1, 0, 2], r1 [2, 1, 0], r2 [0, 3, 1].
TEST(Autograd, AllToAllVMovesUnevenRowsAndBack) {
  const std::vector<std::vector<int64_t>> send = {{1, 0, 2}, {2, 1, 0}, {0, 3, 1}};
  const std::vector<std::vector<double>> want = {{0, 10, 11}, {12, 20, 21, 22}, {1, 2, 23}};
  run_threads(3, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {3});
    auto self = self_mesh(*mesh);
    const int r = b->rank();
    std::vector<int64_t> recv;
    for (int q = 0; q < 3; ++q) recv.push_back(send[q][r]);
    const int64_t rows = send[r][0] + send[r][1] + send[r][2];
    std::vector<double> v;
    for (int64_t j = 0; j < rows; ++j) v.insert(v.end(), {10.0 * r + j, -(10.0 * r + j)});
    DTensor x = from_local(Tensor::from_vector(v, {rows, 2}), self, {Replicate()});
    set_requires_grad(x);
    DTensor y = all_to_all_v(x, *mesh, 0, send[r], recv);
    ASSERT_EQ(y.shape(), (Shape{static_cast<int64_t>(want[r].size()), 2}));
    std::vector<double> got = y.local_tensor().to_vector<double>();
    for (size_t i = 0; i < want[r].size(); ++i) {
      EXPECT_EQ(got[2 * i], want[r][i]) << "rank " << r << " row " << i;
      EXPECT_EQ(got[2 * i + 1], -want[r][i]) << "rank " << r << " row " << i;
    }
    // Every row lands once, so d sum(y * y) / dx = 2 x: the backward sends each gradient row home.
    backward(F::sum(F::mul(y, y)));
    EXPECT_TRUE(allclose(grad(x)->local_tensor(), kernels::mul(x.local_tensor(), 2.0), 0, 0));
    // Splits that do not cover the rows name the op.
    EXPECT_THROW(all_to_all_v(x, *mesh, 0, {rows, 1, 0}, recv), Error);
  });
}

}  // namespace
}  // namespace dtensor
