// The radix select of median / nanmedian / kthvalue (ops/selection/steps.cc) on 4 thread
// ranks (mesh [4]) with the selected dim, or the whole tensor, sharded, on data that breaks a wrong
// radix select: duplicates across ranks, all-equal rows, -0.0 next to +0.0, +-inf, NaN (median
// propagates it, nanmedian skips it, kthvalue orders it last), float32 denormals, int64 extremes,
// shards left empty by torch.chunk, k = 1 and k = n, every dtype. The reference is the single-device
// op (run_single_device) on the same data: values bit for bit (the sign of a zero too) where it
// defines them, indices exactly. The step's collectives are counted: one all-reduce a digit round
// (4 for 32-bit keys, 8 for 64-bit), plus the index's all-gather and all-reduce along a dim.
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

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
using ops::T;
constexpr int kWorld = 4;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
const Timeout kTimeout = std::chrono::seconds(30);

struct Run {
  std::vector<Tensor> outputs;  // full tensors
  int64_t calls = 0;            // collectives of the step on rank 0
  std::string strategy;
};

// Runs `op` on `x` (positional args after the tensor) with x sharded on `shard_dim` through the
// op's select step.
Run run_select(const std::string& op, const Tensor& x, std::vector<ArgValue> args, int shard_dim) {
  args.insert(args.begin(), T(0));
  Sample s = ops::sample({x.sizes()}, args, {}, {x.dtype()});
  const OpCall call = OpCall::bind(Registry::get().find(op), s.positional, s.keyword, s.tensors,
                                   {Placements{Replicate()}}, Shape{kWorld});
  const auto meta = call.op().meta(call);
  const Strategy* step = nullptr;
  const auto all = expand_strategies(call, meta, /*check_shardable=*/false);
  for (const Strategy& st : all)
    if (st.step() != 0 && st.inputs[0][0].is_shard() && st.inputs[0][0].dim == shard_dim) step = &st;
  if (!step) throw std::runtime_error(absl::StrCat(op, ": no select step sharding dim ", shard_dim));
  Run out;
  out.strategy = step->str();
  run_threads(kWorld, [&](std::shared_ptr<Backend> b) {
    auto mesh = DeviceMesh::create(b, {kWorld}, {}, {}, kTimeout);
    DTensorSpec spec(mesh, step->inputs[0], x.sizes(), x.dtype());
    DTensor in(spec, adversarial_local_block(x, spec.placements, {kWorld}, mesh->coordinate(), 7));
    const int64_t before = mesh->stats().calls;
    auto outs = execute_strategy(call, *step, meta, {in}, kTimeout);
    const int64_t calls = mesh->stats().calls - before;
    std::vector<Tensor> full;
    for (auto& o : outs) full.push_back(o.full_tensor(kTimeout));
    if (b->rank() == 0) {
      out.outputs = full;
      out.calls = calls;
    }
  });
  return out;
}

// Empty when equal: same shape and dtype; integers exactly; floats bit for bit up to the NaN
// payload, the sign of zero only when `zero_sign`.
std::string differ(const Tensor& got, const Tensor& want, bool zero_sign) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return absl::StrCat("got ", got.str(), ", want ", want.str());
  if (!is_floating(want.dtype())) {
    if (got.to_vector<int64_t>() != want.to_vector<int64_t>()) return absl::StrCat("got ", got.str(), ", want ", want.str());
    return "";
  }
  auto g = got.to_vector<double>(), w = want.to_vector<double>();
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = std::isnan(w[i]) ? std::isnan(g[i])
                                       : g[i] == w[i] && (!zero_sign || std::signbit(g[i]) == std::signbit(w[i]));
    if (!same) return absl::StrCat("element ", i, ": got ", g[i], ", want ", w[i], " (", got.str(), " vs ", want.str(), ")");
  }
  return "";
}

int radix_rounds(DType t) {
  switch (t) {
    case DType::kBool:
    case DType::kUInt8:
    case DType::kInt8: return 1;
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kInt16: return 2;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    default: return 8;
  }
}

// Every selection op on x (1-d, or 2-d selecting along dim 1) sharded on the selected dim: results
// equal the single device's and the collective count stays within the rounds.
void check_all(const Tensor& x, const std::string& what) {
  init_ops();
  const bool two_d = x.dim() == 2;
  const int64_t dim = two_d ? 1 : 0;
  const int64_t n = x.size(dim);
  struct Call {
    std::string op;
    std::vector<ArgValue> args;
    bool has_index;
  };
  std::vector<Call> calls = {{"median.dim", {I(dim)}, true}, {"nanmedian.dim", {I(dim)}, true}};
  for (int64_t k : {int64_t{1}, (n + 1) / 2, n}) calls.push_back({"kthvalue", {I(k), I(dim)}, true});
  calls.push_back({"median", {}, false});
  calls.push_back({"nanmedian", {}, false});
  for (const Call& c : calls) {
    std::vector<ArgValue> args = c.args;
    args.insert(args.begin(), T(0));
    Sample s = ops::sample({x.sizes()}, args, {}, {x.dtype()});
    const OpCall single = OpCall::bind(Registry::get().find(c.op), s.positional, s.keyword, s.tensors,
                                       {Placements{Replicate()}}, Shape{kWorld});
    const std::vector<Tensor> want = run_single_device(single, {x});
    const Run got = run_select(c.op, x, c.args, static_cast<int>(dim));
    const std::string where = absl::StrCat(what, ": ", c.op, " ", single.str(), " strategy ", got.strategy, " on ", x.str());
    ASSERT_EQ(got.outputs.size(), want.size()) << where;
    // The whole-tensor median's single-device value is any zero of the tensor (nth_element).
    for (size_t o = 0; o < want.size(); ++o)
      EXPECT_EQ(differ(got.outputs[o], want[o], c.has_index), "") << where << " output " << o;
    const int rounds = radix_rounds(x.dtype()) + (c.has_index ? 2 : 0);
    EXPECT_LE(got.calls, rounds) << where;
    EXPECT_GE(got.calls, radix_rounds(x.dtype())) << where;  // the step ran
  }
}

Tensor f32(const std::vector<float>& v) { return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}); }
Tensor f64(const std::vector<double>& v, DType t = DType::kFloat64) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(t);
}

TEST(DistributedSelect, DuplicatesAcrossRanksEveryDtype) {
  const std::vector<double> v = {3, 1, 3, 3, 2, 3, 1, 3, 3, 2, 3};  // chunks 3, 3, 3, 2
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32,
                  DType::kInt64})
    check_all(f64(v, t), dtype_name(t));
  check_all(f64({1, 0, 1, 1, 0, 0, 1}, DType::kBool), "bool");
}

// The 8- and 16-bit keys: negative values (whose keys flip the sign bit) and the ends of each range.
TEST(DistributedSelect, NarrowIntegers) {
  check_all(f64({-128, 127, -1, 0, 5, -128, 3, 127, -7, 0, 1}, DType::kInt8), "int8");
  check_all(f64({255, 0, 128, 127, 1, 255, 3, 0, 200, 64, 129}, DType::kUInt8), "uint8");
  check_all(f64({-32768, 32767, -1, 0, 300, -32768, -300, 32767, 256, -256, 1}, DType::kInt16), "int16");
}

TEST(DistributedSelect, AllEqual) {
  check_all(f64(std::vector<double>(9, 5.0), DType::kFloat32), "all 5");
  check_all(f64(std::vector<double>(8, -7.0), DType::kInt64), "all -7");
}

TEST(DistributedSelect, NegativeZeroBesidePositiveZero) {
  check_all(f32({0.0f, -0.0f, -0.0f, 0.0f, -0.0f, 1.0f, -1.0f, 0.0f, -0.0f}), "zeros");
  check_all(f32({-0.0f, 0.0f, -0.0f, 0.0f, -0.0f}), "zeros, -0 first");
  check_all(f64({0.0, -0.0, -0.0, 0.0}, DType::kFloat16), "zeros float16");
}

TEST(DistributedSelect, InfinitiesAndNaNs) {
  check_all(f64({kInf, -kInf, kNaN, 1, -kInf, kInf, kNaN, 0, 2}, DType::kFloat32), "inf and nan");
  check_all(f64({kInf, -kInf, kNaN, 1, -kInf, kInf, kNaN, 0, 2}, DType::kFloat64), "inf and nan float64");
  check_all(f64({kInf, -kInf, kNaN, 1, -kInf, kInf, kNaN, 0, 2}, DType::kBFloat16), "inf and nan bfloat16");
  check_all(f64({kNaN, kNaN, kNaN, kNaN, kNaN}, DType::kFloat32), "all nan");
  check_all(f64({kInf, kInf, kInf, -kInf, -kInf}, DType::kFloat32), "only infinities");
  // NaN with the sign bit set: its raw key would sort below -inf.
  check_all(f64({-kNaN, 1, -kInf, -kNaN, 2, 3}, DType::kFloat32), "negative nan");
}

TEST(DistributedSelect, Denormals) {
  const float tiny = std::numeric_limits<float>::denorm_min();
  check_all(f32({tiny, -tiny, 1e-40f, FLT_MIN, -1e-40f, 0.0f, tiny, 3 * tiny, -FLT_MIN, 2e-39f}), "denormals");
  const double dtiny = std::numeric_limits<double>::denorm_min();
  check_all(f64({dtiny, -dtiny, 0.0, 5 * dtiny, DBL_MIN, -3 * dtiny}), "float64 denormals");
}

TEST(DistributedSelect, IntegerExtremes) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  check_all(Tensor::from_vector(std::vector<int64_t>{hi, lo, -1, 0, 1, hi, lo + 1, hi - 1}, {8}), "int64");
  const int32_t lo32 = std::numeric_limits<int32_t>::min(), hi32 = std::numeric_limits<int32_t>::max();
  check_all(Tensor::from_vector(std::vector<int32_t>{hi32, lo32, -1, 0, lo32, 1, hi32}, {7}), "int32");
}

TEST(DistributedSelect, EmptyShards) {
  check_all(f32({2.0f, 1.0f}), "n = 2");  // chunks 1, 1, 0, 0
  check_all(f64({kNaN, 1, 1}, DType::kFloat32), "n = 3 with nan");
  check_all(f32({4.0f}), "n = 1");
}

TEST(DistributedSelect, ManyRowsCoarseValuesWithNaNs) {
  // Rows along dim 1, few distinct values (ties everywhere), about one NaN in eight.
  for (uint64_t seed : {1u, 2u, 3u}) {
    Tensor x = ops::coarse_input(TensorMeta{{5, 13}, DType::kFloat32}, seed, /*nans=*/true);
    check_all(x, absl::StrCat("coarse seed ", seed));
  }
  // Random floats on a fine grid, some rows without a NaN.
  check_all(random_tensor({4, 10}, DType::kFloat64, 11), "random float64");
}

}  // namespace
}  // namespace dtensor
