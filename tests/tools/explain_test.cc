// `dtensor explain` against the conformance cases and its error contract.
#include "dispatch/explain.h"

#include <fstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "propagation/cost_model.h"
#include "propagation/hardware.h"

namespace dtensor::tools {
namespace {

using json = nlohmann::json;

TEST(Explain, EveryPublicConformanceCasePassesWithRun) {
  std::ifstream in("tests/conformance/public.jsonl");
  ASSERT_TRUE(in) << "missing tests/conformance/public.jsonl";
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    ++cases;
    json ans = json::parse(explain_line(line));
    json expect = json::parse(line)["expect"];
    ASSERT_FALSE(ans.contains("error")) << line << "\n-> " << ans.dump();
    json outs = json::array(), ins = json::array();
    for (const auto& o : ans["outputs"]) outs.push_back(o["placements"]);
    for (const auto& i : ans["inputs"]) ins.push_back(i["to"]);
    EXPECT_EQ(outs, expect["outputs"]) << line;
    EXPECT_EQ(ins, expect["inputs"]) << line;
    ASSERT_TRUE(ans.contains("run")) << line;
    EXPECT_TRUE(ans["run"]["match"].get<bool>()) << line << "\n-> " << ans.dump();
    EXPECT_TRUE(ans["expect_match"].get<bool>()) << line;
  }
  EXPECT_GE(cases, 21);
}

TEST(Explain, AnswerCarriesShapesCollectivesAndCost) {
  // mm with S(0) x S(0): all-gathering mat2 (384 B a rank) loses to one all_to_all turning self
  // into S(1) (96 B: 3/4 of a rank's 128-byte share) for a P(sum) output.
  json ans = json::parse(explain_line(
      R"j({"mesh": [4], "op": "mm", "args": [{"shape": [8, 16], "placements": ["S(0)"]},
          {"shape": [16, 8], "placements": ["S(0)"]}], "run": true})j"));
  ASSERT_FALSE(ans.contains("error")) << ans.dump();
  EXPECT_EQ(ans["outputs"][0]["shape"], json::parse("[8, 8]"));
  EXPECT_EQ(ans["outputs"][0]["dtype"], "float32");
  ASSERT_EQ(ans["collectives"].size(), 1u) << ans.dump();
  EXPECT_EQ(ans["collectives"][0]["kind"], "all_to_all");
  EXPECT_EQ(ans["collectives"][0]["mesh_dim"], 0);
  EXPECT_EQ(ans["collectives"][0]["bytes"], 96);
  EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["P(sum)"])j"));
  EXPECT_EQ(ans["inputs"][0]["to"], json::parse(R"j(["S(1)"])j"));
  EXPECT_GT(ans["cost_us"].get<double>(), 0.0);
  EXPECT_TRUE(ans["run"]["match"].get<bool>());
}

TEST(Explain, PartialOutputFeedingANonLinearOpIsReduceScattered) {
  // gelu of a P(sum) activation: reduce_scatter (sequence parallelism) beats all_reduce.
  json ans = json::parse(explain_line(
      R"j({"mesh": [4], "op": "gelu", "args": [{"shape": [64, 32], "placements": ["P(sum)"]}], "run": true})j"));
  ASSERT_FALSE(ans.contains("error")) << ans.dump();
  EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["S(0)"])j"));
  EXPECT_EQ(ans["collectives"][0]["kind"], "reduce_scatter");
  EXPECT_TRUE(ans["run"]["match"].get<bool>());
}

TEST(Explain, ErrorsStayOnTheirLine) {
  json bad = json::parse(explain_line("{not json"));
  EXPECT_NE(bad["error"].get<std::string>().find("invalid JSON"), std::string::npos);
  json unknown = json::parse(explain_line(R"j({"mesh": [2], "op": "frobnicate", "args": []})j"));
  EXPECT_NE(unknown["error"].get<std::string>().find("unsupported op 'frobnicate'"), std::string::npos);
  EXPECT_NE(unknown["error"].get<std::string>().find("registered ops: "), std::string::npos);
  // Shapes the op rejects: the error names the op, shapes and placements, and what is accepted.
  std::string e = json::parse(explain_line(
      R"j({"mesh": [2], "op": "mm", "args": [{"shape": [4, 3], "placements": ["S(0)"]}, {"shape": [4, 3]}]})j"))["error"];
  EXPECT_NE(e.find("mm(float32[4, 3] [S(0)], float32[4, 3] [R])"), std::string::npos) << e;
  EXPECT_NE(e.find("accepted"), std::string::npos) << e;
  // Placements that don't fit the mesh or the tensor.
  std::string p = json::parse(explain_line(
      R"j({"mesh": [2, 2], "op": "neg", "args": [{"shape": [4], "placements": ["S(0)"]}]})j"))["error"];
  EXPECT_NE(p.find("for a 2-d mesh"), std::string::npos) << p;
  std::string q = json::parse(explain_line(
      R"j({"mesh": [2], "op": "neg", "args": [{"shape": [4], "placements": ["S(3)"]}]})j"))["error"];
  EXPECT_NE(q.find("accepted: S(-1) to S(0)"), std::string::npos) << q;
  std::string k = json::parse(explain_line(
      R"j({"mesh": [2], "op": "softmax", "args": [{"shape": [4]}], "kwargs": {"dim": 0, "dtipe": 1}})j"))["error"];
  EXPECT_NE(k.find("unknown argument 'dtipe'"), std::string::npos) << k;
}

// Sizes taken from an argument are checked for overflow: index_select_backward's self_sizes.
TEST(Explain, IndexSelectBackwardRefusesSelfSizesBeyondInt64) {
  const std::string e = json::parse(explain_line(
      R"j({"mesh": [2], "op": "index_select_backward", "args": [{"shape": [2, 4]},
          [4611686018427387904, 4], 0, {"shape": [2], "dtype": "int64"}]})j"))
                            .value("error", "");
  EXPECT_NE(e.find("index_select_backward("), std::string::npos) << e;
  EXPECT_NE(e.find("self_sizes element count"), std::string::npos) << e;
}

// The planned family (ops/planned/): explain plans its ops like any other, and "run" refuses them
// by name: they have no kernel.
TEST(Explain, PlannedOpsArePlannedNotRun) {
  const std::string req =
      R"j({"mesh": [2], "op": "pad", "args": [{"shape": [4, 6], "placements": ["S(0)"]}, [1, 2]])j";
  json ans = json::parse(explain_line(req + "}"));
  ASSERT_FALSE(ans.contains("error")) << ans.dump();
  EXPECT_EQ(ans["outputs"][0]["shape"], json::parse("[4, 9]"));
  EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["S(0)"])j"));
  EXPECT_EQ(ans["collectives"].size(), 0u) << ans.dump();
  json run = json::parse(explain_line(req + R"j(, "run": true})j"));
  const std::string e = run.value("error", "");
  EXPECT_NE(e.find("pad has no kernel (the planned family"), std::string::npos) << run.dump();
}

// Weighted shards in explain's notation: parsed, carried through mm with no collective, executed
// ("run") against the single-device op; a wrong weight count or a zero weight is an error on its line.
TEST(Explain, WeightedShardsParsePrintAndRun) {
  json ans = json::parse(explain_line(
      R"j({"mesh": [4], "op": "mm", "run": true, "args": [{"shape": [10, 8], "placements": ["S(0)[3:2:2:1]"]},
          {"shape": [8, 6], "placements": ["R"]}]})j"));
  EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["S(0)[3:2:2:1]"])j")) << ans.dump();
  EXPECT_TRUE(ans["collectives"].empty()) << ans.dump();
  EXPECT_EQ(ans["run"]["match"], true) << ans.dump();
  json bad = json::parse(explain_line(
      R"j({"mesh": [4], "op": "relu", "args": [{"shape": [10, 8], "placements": ["S(0)[3:1]"]}]})j"));
  EXPECT_NE(bad["error"].get<std::string>().find("has 2 weights"), std::string::npos) << bad.dump();
  json zero = json::parse(explain_line(
      R"j({"mesh": [2], "op": "relu", "args": [{"shape": [10, 8], "placements": ["S(0)[3:0]"]}]})j"));
  EXPECT_NE(zero["error"].get<std::string>().find("not positive"), std::string::npos) << zero.dump();
}

TEST(Explain, NegativeShardDimsAreWrittenNonNegative) {
  json ans = json::parse(explain_line(
      R"j({"mesh": [2], "op": "relu", "args": [{"shape": [4, 6], "placements": ["S(-1)"]}]})j"));
  EXPECT_EQ(ans["inputs"][0]["from"], json::parse(R"j(["S(1)"])j"));
  EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["S(1)"])j"));
}

}  // namespace
}  // namespace dtensor::tools

namespace dtensor::tools {
namespace {

TEST(Explain, LargeScansKeepTheScannedDimShardedTinyOnesMayNot) {
  // cumsum of [4096, 4096] S(0) along dim 0 on 4 ranks: the carry exchange moves one row per rank.
  json big = json::parse(explain_line(
      R"j({"mesh": [4], "op": "cumsum", "args": [{"shape": [4096, 4096], "placements": ["S(0)"]}], "kwargs": {"dim": 0}})j"));
  ASSERT_FALSE(big.contains("error")) << big.dump();
  EXPECT_EQ(big["outputs"][0]["placements"], json::parse(R"j(["S(0)"])j"));
  EXPECT_EQ(big["inputs"][0]["to"], json::parse(R"j(["S(0)"])j"));
  ASSERT_EQ(big["collectives"].size(), 1u);
  const int64_t tensor_bytes = int64_t{4096} * 4096 * 4;
  EXPECT_EQ(big["collectives"][0]["bytes"].get<int64_t>(), 3 * 4096 * 4);  // 3 rows of 4096 floats
  EXPECT_LT(big["collectives"][0]["bytes"].get<int64_t>() * 1000, tensor_bytes);
  // A tiny one: whatever the model picks, it states the collectives and their cost.
  json tiny = json::parse(explain_line(
      R"j({"mesh": [4], "op": "cumsum", "args": [{"shape": [4, 1], "placements": ["S(0)"]}], "kwargs": {"dim": 0}, "run": true})j"));
  ASSERT_FALSE(tiny.contains("error")) << tiny.dump();
  EXPECT_TRUE(tiny["run"]["match"].get<bool>());
  EXPECT_GT(tiny["cost_us"].get<double>(), 0.0);
  // Whichever the cost model prefers at this size, the answer names the collective it pays for.
  EXPECT_FALSE(tiny["collectives"].empty());
}

}  // namespace
}  // namespace dtensor::tools

namespace dtensor::tools {
namespace {

// A bare op name resolves among its overloads by the argument types, as in ATen: pow(x, 3) is
// pow.Tensor_Scalar, pow(x, y) the Tensor-Tensor pow; with run the values match the single device.
TEST(Explain, BareNameResolvesTheOverloadByArgumentTypes) {
  json scalar = json::parse(explain_line(
      R"x({"mesh":[2],"op":"pow","args":[{"shape":[6],"placements":["S(0)"]},3],"run":true})x"));
  ASSERT_FALSE(scalar.contains("error")) << scalar.dump();
  EXPECT_TRUE(scalar["run"]["match"].get<bool>());
  EXPECT_EQ(scalar["inputs"].size(), 1u);
  json tensor = json::parse(explain_line(
      R"x({"mesh":[2],"op":"pow","args":[{"shape":[6],"placements":["S(0)"]},{"shape":[6]}],"run":true})x"));
  ASSERT_FALSE(tensor.contains("error")) << tensor.dump();
  EXPECT_EQ(tensor["inputs"].size(), 2u);
  // No overload fits: every one is named with its reason.
  json none = json::parse(explain_line(R"x({"mesh":[2],"op":"pow","args":[{"shape":[6]},"x"]})x"));
  ASSERT_TRUE(none.contains("error"));
  const std::string msg = none["error"].get<std::string>();
  EXPECT_NE(msg.find("no overload accepts"), std::string::npos) << msg;
  EXPECT_NE(msg.find("pow.Tensor_Scalar"), std::string::npos) << msg;
}

}  // namespace
}  // namespace dtensor::tools

namespace dtensor::tools {
namespace {

// The median of a large float32 tensor sharded S(0) over 4 ranks stays sharded on the shipped
// h100-nvlink profile: the radix select's 4 all-reduces of 257 counts (about 4 x 18 µs of latency)
// cost less than all-gathering 3/4 of the tensor a rank (>= 140 µs at 360 GB/s from 64 MiB on).
TEST(Explain, LargeMediansKeepTheTensorShardedThroughTheRadixSelect) {
  const HardwareProfile& hw = hardware_profile(kDefaultHardware);
  ASSERT_EQ(hw.name, "h100-nvlink");
  const LinkModel link = hw.links_for_mesh({4})[0];
  for (int64_t mib : {64, 256}) {
    const int64_t n = mib * (int64_t{1} << 20) / 4;
    json ans = json::parse(explain_line(R"j({"mesh": [4], "op": "median", "args": [{"shape": [)j" +
                                          std::to_string(n) + R"j(], "placements": ["S(0)"]}]})j"));
    ASSERT_FALSE(ans.contains("error")) << ans.dump();
    EXPECT_EQ(ans["inputs"][0]["to"], json::parse(R"j(["S(0)"])j")) << ans.dump();
    EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["R"])j")) << ans.dump();
    ASSERT_EQ(ans["collectives"].size(), 1u) << ans.dump();
    EXPECT_EQ(ans["collectives"][0]["kind"], "all_reduce");
    // 4 rounds of 257 int32 counts, 2 (n - 1) / n of them sent a rank each round.
    EXPECT_EQ(ans["collectives"][0]["bytes"].get<int64_t>(), 4 * comm_bytes_sent(CommKind::kAllReduce, 257 * 4, 4));
    const double gather_us = collective_time_us(CommKind::kAllGather, mib * (int64_t{1} << 20) * 3 / 4, 4, link);
    const double cost = ans["cost_us"].get<double>();
    EXPECT_GT(cost, 0.0);
    EXPECT_LT(cost, gather_us) << ans.dump();
    // explain prints µs with 3 decimals.
    EXPECT_NEAR(cost, 4 * collective_time_us(CommKind::kAllReduce, comm_bytes_sent(CommKind::kAllReduce, 257 * 4, 4), 4, link),
                1e-3);
  }
}

}  // namespace
}  // namespace dtensor::tools

namespace dtensor::tools {
namespace {

TEST(Explain, GroupedMmShardsExpertsAndTheirColumns) {
  // MoE experts b[G=4, K, N] on mesh [ep=2, tp=2]: groups on ep (each rank runs its experts' rows:
  // P(sum)), N on tp (S(1) of the output); offs stays replicated; no collective; the run matches the
  // single-device op on valid offsets.
  json ans = json::parse(explain_line(
      R"j({"mesh": [2, 2], "op": "grouped_mm", "args": [{"shape": [12, 8]},
          {"shape": [4, 8, 6], "placements": ["S(0)", "S(2)"]},
          {"shape": [4], "dtype": "int32"}], "run": true})j"));
  ASSERT_FALSE(ans.contains("error")) << ans.dump();
  EXPECT_EQ(ans["outputs"][0]["shape"], json::parse("[12, 6]"));
  EXPECT_EQ(ans["outputs"][0]["placements"], json::parse(R"j(["P(sum)", "S(1)"])j"));
  EXPECT_EQ(ans["inputs"][2]["to"], json::parse(R"j(["R", "R"])j"));
  EXPECT_TRUE(ans["collectives"].empty()) << ans.dump();
  EXPECT_TRUE(ans["run"]["match"].get<bool>()) << ans.dump();
  // Tokens split on one dim and K inside the experts on the other: [S(0), P(sum)].
  json k = json::parse(explain_line(
      R"j({"mesh": [2, 2], "op": "grouped_mm", "args": [{"shape": [12, 8], "placements": ["S(0)", "S(1)"]},
          {"shape": [4, 8, 6], "placements": ["R", "S(1)"]},
          {"shape": [4], "dtype": "int32"}], "run": true})j"));
  ASSERT_FALSE(k.contains("error")) << k.dump();
  EXPECT_EQ(k["outputs"][0]["placements"], json::parse(R"j(["S(0)", "P(sum)"])j"));
  EXPECT_TRUE(k["run"]["match"].get<bool>()) << k.dump();
  // Bad offs dtype and mismatched K name the op and the shapes.
  std::string e = json::parse(explain_line(
      R"j({"mesh": [2], "op": "grouped_mm", "args": [{"shape": [12, 8]}, {"shape": [4, 8, 6]}, {"shape": [4]}]})j"))["error"];
  EXPECT_NE(e.find("grouped_mm(float32[12, 8]"), std::string::npos) << e;
  EXPECT_NE(e.find("int32"), std::string::npos) << e;
  std::string km = json::parse(explain_line(
      R"j({"mesh": [2], "op": "grouped_mm", "args": [{"shape": [12, 8]}, {"shape": [4, 7, 6]}, {"shape": [4], "dtype": "int32"}]})j"))["error"];
  EXPECT_NE(km.find("contraction dims differ"), std::string::npos) << km;
}

// flex_attention: batch and heads shard as for SDPA, the mask data alongside (document ids and
// block mask with the batch, ALiBi slopes with the heads), query rows with the document ids whole;
// every run matches the single device.
TEST(Explain, FlexAttentionShardsBatchHeadsAndQueryRowsWithItsMaskData) {
  auto ask = [](const std::string& line) {
    json ans = json::parse(explain_line(line));
    EXPECT_FALSE(ans.contains("error")) << line << "\n-> " << ans.dump();
    EXPECT_TRUE(ans["run"]["match"].get<bool>()) << ans.dump();
    json ins = json::array();
    for (const auto& i : ans["inputs"]) ins.push_back(i["to"]);
    return std::make_pair(ans["outputs"][0]["placements"], ins);
  };
  const std::string qkv = R"j({"shape": [4, 2, 16, 8], "placements": ["P"]}, {"shape": [4, 2, 16, 8], "placements": ["P"]},
      {"shape": [4, 2, 16, 8], "placements": ["P"]})j";
  auto with = [&](const std::string& p) {
    std::string s = qkv;
    for (size_t at; (at = s.find("\"P\"")) != std::string::npos;) s.replace(at, 3, "\"" + p + "\"");
    return s;
  };
  // Heads sharded: the slopes follow them, the per-batch document ids stay whole.
  auto [out, ins] = ask(R"j({"mesh": [2], "op": "flex_attention", "args": [)j" + with("S(1)") +
                        R"j(], "kwargs": {"document_ids": {"shape": [4, 16], "dtype": "int64"},
      "alibi_slopes": {"shape": [2]}, "is_causal": true, "soft_cap": 4.0, "block_size": 4}, "run": true})j");
  EXPECT_EQ(out, json::parse(R"j(["S(1)"])j"));
  // (kwargs in name order: alibi_slopes, then document_ids)
  EXPECT_EQ(ins, json::parse(R"j([["S(1)"], ["S(1)"], ["S(1)"], ["S(0)"], ["R"]])j"));
  // Batch sharded: document ids and the block mask (one row per batch entry) with it.
  std::tie(out, ins) = ask(R"j({"mesh": [2], "op": "flex_attention", "args": [)j" + with("S(0)") +
                           R"j(], "kwargs": {"document_ids": {"shape": [4, 16], "dtype": "int64", "placements": ["S(0)"]},
      "block_mask": {"shape": [4, 4, 4], "dtype": "int32", "placements": ["S(0)"]}, "is_causal": true,
      "block_size": 4}, "run": true})j");
  EXPECT_EQ(out, json::parse(R"j(["S(0)"])j"));
  EXPECT_EQ(ins, json::parse(R"j([["S(0)"], ["S(0)"], ["S(0)"], ["S(0)"], ["S(0)"]])j"));
  // Query rows sharded (key and value replicated): the mask reads whole document ids at each
  // shard's global positions.
  const std::string rows = R"j({"shape": [1, 1, 64, 8], "placements": ["S(2)"]}, {"shape": [1, 1, 64, 8]},
      {"shape": [1, 1, 64, 8]})j";
  std::tie(out, ins) = ask(R"j({"mesh": [4], "op": "flex_attention", "args": [)j" + rows +
                           R"j(], "kwargs": {"document_ids": {"shape": [64], "dtype": "int64"}, "window": 9,
      "is_causal": true, "block_size": 8}, "run": true})j");
  EXPECT_EQ(out, json::parse(R"j(["S(2)"])j"));
  EXPECT_EQ(ins, json::parse(R"j([["S(2)"], ["R"], ["R"], ["R"]])j"));
}

}  // namespace
}  // namespace dtensor::tools
