// softmax / log_softmax / logsumexp / cross_entropy with the reduced (class) dim sharded over 4
// thread ranks (mesh [4]), through their softmax_stats / loss_parallel steps (ops/norm/steps.cc), on
// rows far from 0: equal values of 1e30 or -1e20, 1e30 beside ordinary values, a row of -inf only,
// and an ordinary row. The reference is the single-device op (run_single_device) on the same float64
// data, within 1e-12 relative. Log-probabilities formed as x - logsumexp lose log(sum) on such rows
// (a row of four equal 1e30 values gave 0 for -log 4), so this fails where the gentle samples of the
// distributed ops test cannot.
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "dispatch/dispatch.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/dtensor.h"
#include "dtensor/partial_split.h"
#include "gtest/gtest.h"
#include "ops/common/defs.h"

namespace dtensor {
namespace {

using ops::I;
using ops::L;
using ops::T;
using ops::V;
constexpr int kWorld = 4;
constexpr double kInf = std::numeric_limits<double>::infinity();
const Timeout kTimeout = std::chrono::seconds(30);

// [5, 8] float64: 8 classes, 2 a rank.
Tensor far_rows() {
  return Tensor::from_vector<double>(
      {1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30, 1e30,              // equal, far above 0
       -1e20, -1e20, -1e20, -1e20, -1e20, -1e20, -1e20, -1e20,      // equal, far below 0
       1e30, 0.5, -3, 1e30 - 1e14, 2, 1e30, -kInf, 7,                // 1e30 beside ordinary values
       0.25, -1.5, 3, 0.5, -2, 1, 0, 2.5,                            // ordinary
       -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},      // -inf only: NaN everywhere
      {5, 8});
}

// Runs `call` with its input 0 sharded on dim 1 through the op's step; returns the full outputs.
std::vector<Tensor> run_sharded(const OpCall& call, const std::vector<Tensor>& globals, std::string* strategy) {
  const auto meta = call.op().meta(call);
  const Strategy* step = nullptr;
  const auto all = expand_strategies(call, meta, /*check_shardable=*/false);
  for (const Strategy& st : all)
    if (st.step() != 0 && st.inputs[0][0].is_shard() && st.inputs[0][0].dim == 1) step = &st;
  if (!step) throw std::runtime_error(absl::StrCat(call.str(), ": no step sharding dim 1"));
  *strategy = step->str();
  EXPECT_NE(step->step(), 0) << call.str();
  std::vector<Tensor> out;
  run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {kWorld}, {}, {}, kTimeout);
    std::vector<DTensor> in;
    for (size_t i = 0; i < globals.size(); ++i) {
      DTensorSpec spec(mesh, step->inputs[i], globals[i].sizes(), globals[i].dtype());
      in.emplace_back(spec, adversarial_local_block(globals[i], spec.placements, {kWorld}, mesh->coordinate(), 3));
    }
    auto outs = execute_strategy(call, *step, meta, in, kTimeout);
    std::vector<Tensor> full;
    for (auto& o : outs) full.push_back(o.full_tensor(kTimeout));
    if (b->rank() == 0) out = full;
  });
  return out;
}

void expect_close(const Tensor& got, const Tensor& want, const std::string& where) {
  ASSERT_EQ(got.sizes(), want.sizes()) << where;
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool ok = std::isnan(w[i]) ? std::isnan(g[i])
                                     : g[i] == w[i] || std::abs(g[i] - w[i]) <= 1e-12 * (1 + std::abs(w[i]));
    EXPECT_TRUE(ok) << where << ": element " << i << " got " << g[i] << ", want " << w[i];
  }
}

void check(const std::string& op, const std::vector<Tensor>& globals, std::vector<ArgValue> args,
           std::vector<std::pair<std::string, ArgValue>> kwargs = {}) {
  init_ops();
  std::vector<Shape> shapes;
  std::vector<DType> dtypes;
  for (const Tensor& t : globals) shapes.push_back(t.sizes()), dtypes.push_back(t.dtype());
  Sample s = ops::sample(shapes, args, kwargs, dtypes);
  std::vector<Placements> repl(globals.size(), Placements{Replicate()});
  const OpCall call = OpCall::bind(Registry::get().find(op), s.positional, s.keyword, s.tensors, repl, Shape{kWorld});
  const std::vector<Tensor> want = run_single_device(call, globals);
  std::string strategy;
  const std::vector<Tensor> got = run_sharded(call, globals, &strategy);
  ASSERT_EQ(got.size(), want.size()) << call.str();
  for (size_t o = 0; o < want.size(); ++o) expect_close(got[o], want[o], absl::StrCat(call.str(), " ", strategy));
}

TEST(SoftmaxStats, RowsFarFromZeroMatchOneDevice) {
  const Tensor x = far_rows();
  check("log_softmax", {x}, {T(0), I(1)});
  check("softmax", {x}, {T(0), I(1)});
  check("logsumexp", {x}, {T(0), L({1})});
}

TEST(SoftmaxStats, LossParallelRowsFarFromZeroMatchOneDevice) {
  // The -inf-only row is left out: its loss is NaN on both sides, which the sum would spread.
  const Tensor x = far_rows().narrow(0, 0, 4).contiguous();
  const Tensor target = Tensor::from_vector<int64_t>({3, 0, 5, 6}, {4});
  const Tensor weight = Tensor::from_vector<double>({0.5, 1, 2, 1, 3, 1, 0.25, 1}, {8});
  for (const char* red : {"none", "sum", "mean"}) {
    check("cross_entropy", {x, target}, {T(0), T(1)}, {{"reduction", V(std::string(red))}});
    check("cross_entropy", {x, target}, {T(0), T(1)},
          {{"reduction", V(std::string(red))}, {"label_smoothing", V(0.1)}});
  }
  check("cross_entropy", {x, target, weight}, {T(0), T(1), T(2)}, {{"reduction", V(std::string("none"))}});
}

}  // namespace
}  // namespace dtensor
