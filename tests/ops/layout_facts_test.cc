// OpDef::aten.layout_dependent (ops/registry.h) against the kernels: the bridge
// (python/dtensor/torch_bridge.py) runs ATen on each rank's blocks unless the op is marked layout
// dependent, so an unmarked op must compute on a block, as if the block were the whole tensor, what
// it computes there under the layout. For every op, every sample, and the strategies of 1-d and 2-d
// meshes with adversarial (uneven, Partial) blocks, the kernel runs twice per rank: with its
// LocalContext, and as a single-device call bound to the block's shapes (the size argument of a
// `local_size` op being the output block's shape, as the bridge passes it). A difference (values,
// shape, or an error on the block) in an unmarked op fails the test; a marked op where no sample
// shows one is listed (the mark costs speed through the bridge, not correctness).
#include <iostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dispatch/dispatch.h"
#include "gtest/gtest.h"
#include "tests/ops/simulated_mesh.h"

namespace dtensor {
namespace {

bool takes_local_size(const OpDef& op) {
  for (const AtenAlias& a : op.aten.aliases)
    if (a.local_size) return true;
  return false;
}

// The call with the block's shapes (what ATen sees on this rank); null when binding fails there.
std::optional<OpCall> block_call(const OpCall& call, const Sample& sample,
                                 const std::vector<Tensor>& blocks, const LocalContext& ctx,
                                 std::string* why) {
  std::vector<TensorMeta> metas;
  for (size_t t = 0; t < blocks.size(); ++t) metas.push_back({blocks[t].sizes(), blocks[t].dtype()});
  std::vector<ArgValue> pos = sample.positional;
  std::vector<std::pair<std::string, ArgValue>> kw = sample.keyword;
  if (takes_local_size(call.op())) {
    const Shape block = ctx.out_block(0).first;
    const IValue size(std::vector<int64_t>(block.begin(), block.end()));
    for (const char* arg : {"size", "shape"}) {
      const int at = call.op().schema.index_of(arg);
      if (at >= 0 && at < static_cast<int>(pos.size())) pos[at] = size;
      for (auto& [k, v] : kw)
        if (k == arg) v = size;
    }
  }
  std::vector<Placements> pl(metas.size(), Placements{Replicate()});
  try {
    return OpCall::bind(call.op(), pos, kw, metas, pl, Shape{1});
  } catch (const std::exception& e) {
    *why = absl::StrCat("binding the block call fails: ", e.what());
    return std::nullopt;
  }
}

// Empty when the kernel computes the same on every rank's blocks with and without the layout.
std::string layout_difference(const OpCall& call, const Sample& sample, const Strategy& s,
                              const OutMeta& meta,
                              const std::vector<Tensor>& globals, uint64_t seed) {
  for (int64_t flat = 0; flat < numel(call.mesh_shape()); ++flat) {
    const auto [blocks, ctx] =
        testing::rank_inputs(call, s, meta, globals, testing::coord_of(flat, call.mesh_shape()), seed);
    std::vector<Tensor> laid_out;
    try {
      laid_out = call.op().kernel(blocks, call, ctx);
    } catch (const std::exception&) {
      return "";  // the validator reports kernels that fail under their layout
    }
    std::string why;
    auto local = block_call(call, sample, blocks, ctx, &why);
    if (!local) return why;
    std::vector<Tensor> on_block;
    try {
      on_block = run_single_device(*local, blocks);
    } catch (const std::exception& e) {
      return absl::StrCat("the kernel on the block alone throws: ", e.what());
    }
    testing::Simulated got;
    got.outputs = laid_out;
    for (const Tensor& t : laid_out) got.scales.push_back(Tensor::zeros(t.sizes(), DType::kFloat64));
    std::string err = testing::compare(got, on_block);
    if (!err.empty()) return absl::StrCat("rank ", flat, ": ", err);
  }
  return "";
}

TEST(LayoutFacts, UnmarkedKernelsComputeTheSameOnABlock) {
  init_ops();
  std::vector<std::string> unmarked;
  std::set<std::string> shown;
  int checked = 0;
  for (const std::string& name : Registry::get().names()) {
    const OpDef& op = Registry::get().find(name);
    if (!op.kernel || !op.samples) continue;  // the planned family runs nowhere
    uint64_t seed = 41;
    std::string first;
    for (const Sample& sample : op.samples()) {
      for (const Shape& mesh : std::vector<Shape>{{3}, {2, 2}}) {
        const OpCall call = testing::bind_on(op, sample, mesh);
        const OutMeta meta = op.meta(call);
        const std::vector<Tensor> globals = testing::make_globals(call, seed);
        auto strategies = expand_strategies(call, meta, /*check_shardable=*/false);
        const size_t step = strategies.size() / 60 + 1;
        for (size_t k = 0; k < strategies.size() && first.empty(); k += step) {
          if (strategies[k].step() != 0) continue;  // a distributed step is dtensor's by definition
          ++checked;
          std::string d = layout_difference(call, sample, strategies[k], meta, globals, seed);
          if (!d.empty()) first = absl::StrCat(call.str(), " strategy ", strategies[k].str(), ": ", d);
        }
        ++seed;
      }
    }
    if (!first.empty()) shown.insert(name);
    if (!first.empty() && !op.aten.layout_dependent) unmarked.push_back(first);
    if (first.empty() && op.aten.layout_dependent)
      std::cout << "marked layout dependent, no sample shows it: " << name << "\n";
  }
  std::cout << "layout facts: " << checked << " strategies checked; layout dependent: "
            << absl::StrJoin(shown, " ") << "\n";
  EXPECT_GT(checked, 1000);
  EXPECT_TRUE(unmarked.empty())
      << "kernels that compute something else on a block than under their layout; set "
         "OpDef::aten.layout_dependent where the op is defined (ops/registry.h):\n  "
      << absl::StrJoin(unmarked, "\n  ");
}

}  // namespace
}  // namespace dtensor
