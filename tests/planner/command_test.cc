// `dtensor plan` end to end (planner/command.h): bad input gives clear messages saying what would be
// accepted or would fit; the JSON report's schema; the JSON graph format round trip; the picture.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/command.h"
#include "planner/graph_json.h"
#include "planner/models/zoo.h"

namespace dtensor::planner {
namespace {

using json = nlohmann::json;

std::string run(const CommandOptions& o) {
  std::ostringstream out, err;
  run_plan_command(o, out, err);
  return out.str();
}

// The message of the dtensor::Error `o` raises ("" if none).
std::string error_of(const CommandOptions& o) {
  try {
    run(o);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

CommandOptions small(const std::string& model, const std::string& mesh) {
  CommandOptions o;
  o.model = model;
  o.mesh = mesh;
  o.layers = 2;
  o.seq = 256;
  return o;
}

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(PlanCommand, UnknownModelListsTheZoo) {
  std::string e = error_of(small("llama4-giant", "tp=8"));
  EXPECT_NE(e.find("unknown model 'llama4-giant'"), std::string::npos) << e;
  for (const char* m : {"gpt2", "gpt2-xl", "llama3-8b", "llama3-70b", "mixtral-8x7b", "vit-l16", "resnet50"})
    EXPECT_NE(e.find(m), std::string::npos) << m << " in: " << e;
}

TEST(PlanCommand, UnknownHardwareListsTheProfiles) {
  CommandOptions o = small("gpt2", "tp=8");
  o.hardware = "tpu-v9";
  std::string e = error_of(o);
  EXPECT_NE(e.find("tpu-v9"), std::string::npos) << e;
  EXPECT_NE(e.find("h100-nvlink"), std::string::npos) << e;
}

TEST(PlanCommand, MalformedMeshesSayWhatIsAccepted) {
  for (const char* m : {"", "dp=0", "dp=8,dp=8", "a=2,b=2,c=2,d=2", "tp=x"}) {
    std::string e = error_of(small("gpt2", m));
    EXPECT_NE(e.find("mesh"), std::string::npos) << m << ": " << e;
    EXPECT_NE(e.find("dp=8,tp=8"), std::string::npos) << m << ": " << e;  // the example of what is accepted
  }
}

TEST(PlanCommand, MeshDimNothingCanSplitSaysWhatWouldFit) {
  // A graph whose largest dim is 6: no rule can split anything over 16 ranks.
  std::string path = temp_path("tiny.json");
  std::ofstream(path) << R"({"name": "tiny", "training": false, "nodes": [
      {"name": "x", "kind": "input", "shape": [6, 4], "dtype": "float32"},
      {"name": "y", "op": "relu", "args": ["x"]},
      {"name": "z", "op": "sum", "args": ["y", [1]]}]})";
  CommandOptions o;
  o.graph_file = path;
  o.mesh = "tp=16";
  std::string e = error_of(o);
  EXPECT_NE(e.find("mesh dim 'tp' of size 16 cannot split any tensor of tiny"), std::string::npos) << e;
  EXPECT_NE(e.find("Would fit: tp <= 6"), std::string::npos) << e;
  o.mesh = "tp=4";
  EXPECT_EQ(error_of(o), "");
}

TEST(PlanCommand, MemoryLimitNoPlanMeetsSaysWhatWouldFit) {
  CommandOptions o = small("llama3-8b", "tp=8");
  o.layers = 0;  // all 32 layers: at least 8B x 16 B / 8 ranks of weights and optimizer state
  o.seq = 1024;
  o.memory_limit_gb = 4;
  o.compare = false;
  std::string e = error_of(o);
  EXPECT_NE(e.find("no plan of llama3-8b on mesh tp=8 fits in 4.0 GB per device"), std::string::npos) << e;
  EXPECT_NE(e.find("the least memory a plan needs is"), std::string::npos) << e;
  EXPECT_NE(e.find("Would fit: --memory-limit"), std::string::npos) << e;
  EXPECT_NE(e.find("devices"), std::string::npos) << e;
}

TEST(PlanCommand, MissingOrConflictingInputs) {
  CommandOptions o;
  o.mesh = "tp=2";
  EXPECT_NE(error_of(o).find("--model"), std::string::npos);
  o = small("gpt2", "tp=2");
  o.format = "yaml";
  EXPECT_NE(error_of(o).find("accepted: table, json"), std::string::npos);
  o = small("gpt2", "tp=2");
  o.seq = 4096;
  EXPECT_NE(error_of(o).find("sequence length 4096"), std::string::npos);
  CommandOptions g;
  g.graph_file = temp_path("missing-file.json");
  g.mesh = "tp=2";
  EXPECT_NE(error_of(g).find("cannot read"), std::string::npos);
}

TEST(PlanCommand, DevicesRanksEveryMeshAndPrintsTheFastestPlan) {
  CommandOptions o = small("gpt2", "");
  o.devices = 16;
  o.batch = 16;
  o.top = 3;
  o.compare = false;
  o.pipeline = false;
  const std::string table = run(o);
  EXPECT_NE(table.find("16 devices: 7 meshes"), std::string::npos) << table;
  EXPECT_NE(table.find("rank  mesh"), std::string::npos) << table;
  EXPECT_NE(table.find("why the others lost:"), std::string::npos) << table;
  EXPECT_NE(table.find("dp=2,tp=8"), std::string::npos) << table;
  EXPECT_NE(table.find("the fastest, "), std::string::npos) << table;
  o.format = "json";
  const json j = json::parse(run(o));
  ASSERT_TRUE(j.contains("candidates") && j.contains("rejected") && j.contains("best"));
  // --top 3: the 3 fastest exactly; meshes whose lower bound exceeds the 3rd's step time pruned.
  EXPECT_EQ(j["candidates"].size() + j["rejected"].size() + j["pruned"].size(), 7u);
  EXPECT_EQ(j["keep"], 3);
  for (const json& p : j["pruned"]) EXPECT_GT(p["lower_bound_us"].get<double>(), j["kth_step_time_us"].get<double>());
  EXPECT_EQ(j["best"]["totals"]["step_time_us"], j["candidates"][0]["step_time_us"]);
  for (size_t i = 1; i < j["candidates"].size(); ++i)
    EXPECT_LE(j["candidates"][i - 1]["step_time_us"].get<double>(), j["candidates"][i]["step_time_us"].get<double>());
  o.format = "table";
  o.schedule = "zb-h1";  // --devices tries the schedules itself
  EXPECT_NE(error_of(o).find("--schedule with --devices"), std::string::npos);
  o.schedule.clear();
  o.pipeline = true;  // pipeline candidates too: pp=2,... rows, ranked or rejected with a reason
  const std::string with_pp = run(o);
  EXPECT_NE(with_pp.find("pp=2,"), std::string::npos) << with_pp;
  o.mesh = "dp=16";
  EXPECT_NE(error_of(o).find("give --mesh or --devices, not both"), std::string::npos);
}

TEST(PlanCommand, PipelineMeshPlansStagesAndSaysSo) {
  CommandOptions o = small("gpt2", "pp=2,dp=2,tp=2");
  o.layers = 4;
  o.batch = 16;
  o.micro_batches = 4;
  o.compare = false;
  const std::string table = run(o);
  EXPECT_NE(table.find("pipeline: 2 stages, 4 micro-batches, schedule "), std::string::npos) << table;
  // Every schedule planned, the fastest reported: ZB-H1's bubble is 1F1B's less the weight gradients.
  EXPECT_NE(table.find("schedules planned (the fastest that fits is reported): 1f1b: "), std::string::npos) << table;
  EXPECT_NE(table.find("; zb-h1: "), std::string::npos) << table;
  EXPECT_NE(table.find("; interleaved (2 virtual stages): "), std::string::npos) << table;
  EXPECT_NE(table.find("embedding"), std::string::npos) << table;  // the stage rows
  EXPECT_NE(table.find("head"), std::string::npos) << table;
  EXPECT_NE(table.find("mesh dp=2,tp=2 (4 devices)"), std::string::npos) << table;  // the stage's mesh
  o.format = "json";
  o.schedule = "1f1b";
  const json j = json::parse(run(o));
  EXPECT_EQ(j["pipeline"]["stages"], 2);
  EXPECT_EQ(j["pipeline"]["schedule"], "1f1b");
  ASSERT_EQ(j["pipeline"]["per_stage"].size(), 2u);
  EXPECT_EQ(j["pipeline"]["per_stage"][0]["layers"].get<int>() + j["pipeline"]["per_stage"][1]["layers"].get<int>(), 4);
  EXPECT_EQ(j["pipeline"]["per_stage"][0]["in_flight"], 2);  // 1F1B: stage 0 holds p micro-batches
  EXPECT_EQ(j["pipeline"]["per_stage"][1]["in_flight"], 1);
  EXPECT_TRUE(j["pipeline"]["per_stage"][0]["embedding"].get<bool>());
  EXPECT_TRUE(j["pipeline"]["per_stage"][1]["head"].get<bool>());
  // 1F1B: (m + p - 1) micro-batch times, the update and the sends.
  const double t = j["pipeline"]["micro_batch_us"].get<double>();
  EXPECT_NEAR(j["pipeline"]["step_time_us"].get<double>(),
              5 * t + j["pipeline"]["optimizer_us"].get<double>() + 2 * j["pipeline"]["send_us"].get<double>(),
              1e-9 * t);
  o.schedule = "zb-h1";
  const json z = json::parse(run(o));
  EXPECT_EQ(z["pipeline"]["schedule"], "zb-h1");
  EXPECT_LT(z["pipeline"]["step_time_us"].get<double>(), j["pipeline"]["step_time_us"].get<double>());
  EXPECT_EQ(z["pipeline"]["peak_memory_bytes"], j["pipeline"]["peak_memory_bytes"]);
  o.schedule = "interleaved";
  EXPECT_EQ(json::parse(run(o))["pipeline"]["virtual_stages"], 2);  // 2 chunks when not given
  o.schedule = "1f1b";
  o.virtual_stages = 2;
  EXPECT_NE(error_of(o).find("--virtual-stages 2 with --schedule 1f1b; accepted: --virtual-stages with --schedule "
                             "interleaved"),
            std::string::npos);
  o.virtual_stages = 1;
  o.schedule = "gpipe";
  EXPECT_NE(error_of(o).find("accepted: 1f1b, interleaved, zb-h1"), std::string::npos);
  o.format = "table";
  o.schedule.clear();
  o.micro_batches = 3;
  EXPECT_NE(error_of(o).find("3 micro-batches for a global batch of 16"), std::string::npos);
  o = small("gpt2", "dp=2");
  o.schedule = "1f1b";
  EXPECT_NE(error_of(o).find("--schedule 1f1b needs a pp mesh dim"), std::string::npos);
  o = small("gpt2", "pp=2,dp=2");
  o.graph_file = "x.json";
  o.model.clear();
  EXPECT_NE(error_of(o).find("needs a zoo model"), std::string::npos);
}

// pp plus three stage dims (Llama 3's TP, CP, PP, DP): a 4-dim mesh plans when one dim is pp; a
// 4-dim mesh without pp and a 5-dim mesh are refused saying what is accepted.
TEST(PlanCommand, PipelineOverAThreeDimStageMesh) {
  CommandOptions o = small("gpt2", "pp=2,dp=2,cp=2,tp=2");
  o.layers = 4;
  o.batch = 8;
  o.micro_batches = 2;
  o.compare = false;
  o.schedule = "1f1b";
  const std::string table = run(o);
  EXPECT_NE(table.find("on pp=2,dp=2,cp=2,tp=2 (16 devices)"), std::string::npos) << table;
  EXPECT_NE(table.find("mesh dp=2,cp=2,tp=2 (8 devices)"), std::string::npos) << table;
  o.mesh = "dp=2,cp=2,tp=2,ep=2";
  EXPECT_NE(error_of(o).find("has 4 dims and none is pp"), std::string::npos) << error_of(o);
  o.mesh = "pp=2,dp=2,cp=2,tp=2,ep=2";
  EXPECT_NE(error_of(o).find("has 5 dims; accepted: NAME=SIZE[,NAME=SIZE...] with 1 to 3 mesh dims (4 when one is pp"),
            std::string::npos)
      << error_of(o);
  EXPECT_NE(error_of(small("gpt2", "pp=65536,dp=65536,tp=2")).find("more than 1048576 ranks"), std::string::npos);
}

TEST(PlanCommand, BadGraphJsonNamesTheNode) {
  std::string path = temp_path("bad.json");
  std::ofstream(path) << R"({"nodes": [{"name": "x", "kind": "input", "shape": [4, 4]},
                                         {"name": "y", "op": "relu", "args": ["nope"]}]})";
  CommandOptions o;
  o.graph_file = path;
  o.mesh = "tp=2";
  std::string e = error_of(o);
  EXPECT_NE(e.find("node 1 'y'"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown tensor 'nope'"), std::string::npos) << e;
  std::ofstream(path) << R"({"nodes": [{"name": "x", "kind": "input", "shape": [4, 4]},
                                        {"name": "y", "op": "frobnicate", "args": ["x"]}]})";
  e = error_of(o);
  EXPECT_NE(e.find("frobnicate"), std::string::npos) << e;
}

// "shapes" on an op node: the producer's traced output shapes, which must equal the schema's.
TEST(PlanCommand, TracedShapesAreChecked) {
  std::string path = temp_path("traced.json");
  auto write = [&](const std::string& shapes) {
    std::ofstream(path) << R"({"nodes": [{"name": "x", "kind": "input", "shape": [2, 3, 8, 8], "dtype": "float32"},
                                          {"name": "p", "op": "max_pool2d_with_indices", "args": ["x", [2, 2]],
                                           "shapes": )" << shapes << "}]}";
  };
  CommandOptions o;
  o.graph_file = path;
  o.mesh = "tp=2";
  write("[[2, 3, 4, 4], null]");
  EXPECT_NO_THROW(run(o));
  write("[[2, 3, 4, 4], [2, 3, 4, 4]]");
  EXPECT_NO_THROW(run(o));
  write("[[2, 3, 8, 8]]");
  std::string e = error_of(o);
  EXPECT_NE(e.find("node 1 'p': output 0 has shape [2, 3, 4, 4] by the op's schema"), std::string::npos) << e;
  EXPECT_NE(e.find("traced [2,3,8,8]"), std::string::npos) << e;
  write("[null, null, null]");
  EXPECT_NE(error_of(o).find("at most 2 output shapes"), std::string::npos);
  write("[[2, 3, 4]]");
  EXPECT_NE(error_of(o).find("output 0 has shape"), std::string::npos);
  write("[\"2x3\"]");
  EXPECT_NE(error_of(o).find("must be a list of sizes or null"), std::string::npos);
}

// An op whose output has a data-dependent dim (nonzero's row count, OpDef::data_dependent): the
// planner prices it at meta's bound (every element nonzero), takes any traced size for that dim (one
// run's count) and still checks the others.
TEST(PlanCommand, DataDependentShapeIsPricedAtItsBound) {
  std::string path = temp_path("nonzero.json");
  auto write = [&](const std::string& shapes) {
    std::ofstream(path) << R"({"nodes": [{"name": "x", "kind": "input", "shape": [64, 1024], "dtype": "float32"},
                                          {"name": "w", "kind": "param", "shape": [1024, 1024], "dtype": "float32"},
                                          {"name": "h", "op": "linear", "args": ["x", "w"]},
                                          {"name": "y", "op": "nonzero", "args": ["h"], "shapes": )"
                        << shapes << "}]}";
  };
  CommandOptions o;
  o.graph_file = path;
  o.mesh = "tp=4";
  o.format = "json";
  write("[[37, 2]]");
  const json r = json::parse(run(o));
  bool found = false;
  for (const json& op : r["ops"]) {
    if (op["name"] != "y") continue;
    found = true;
    EXPECT_EQ(op["placements"]["outputs"], json::array({"[R]"})) << op.dump();
    EXPECT_GT(op["compute_us"].get<double>(), 0) << op.dump();
  }
  EXPECT_TRUE(found);
  write("[[37, 3]]");
  EXPECT_NE(error_of(o).find("output 0 has shape [65536, 2] by the op's schema"), std::string::npos) << error_of(o);
}

// The ops imported graphs lean on (python/dtensor/planning.py): opaque (no rule: replicated) and
// pad (split along unpadded dims), and what each rejects.
TEST(PlanCommand, OpaqueAndPadOps) {
  std::string path = temp_path("imported.json");
  auto write = [&](const std::string& op_node) {
    std::ofstream(path) << R"({"nodes": [{"name": "x", "kind": "input", "shape": [64, 1024], "dtype": "float32"},
                                          {"name": "w", "kind": "param", "shape": [1024, 1024], "dtype": "float32"},
                                          {"name": "h", "op": "linear", "args": ["x", "w"]},)"
                        << op_node << "]}";
  };
  CommandOptions o;
  o.graph_file = path;
  o.mesh = "tp=4";
  o.format = "json";
  write(R"({"name": "y", "op": "opaque", "args": [["h"], [64, 1024], "float32", "flip"]})");
  json r = json::parse(run(o));
  bool found = false;
  for (const json& op : r["ops"]) {
    if (op["name"] != "y") continue;
    found = true;
    EXPECT_EQ(op["placements"]["outputs"], json::array({"[R]"})) << op.dump();
    EXPECT_GT(op["compute_us"].get<double>(), 0) << op.dump();  // priced as a copy
  }
  EXPECT_TRUE(found);
  // The linear's output is column-split, S(1): padding dim 0 keeps it, padding dim 1 cannot.
  auto pad_output = [&](const std::string& amounts) {
    write(R"({"name": "y", "op": "pad", "args": ["h", )" + amounts + "]}");
    const json report = json::parse(run(o));
    for (const json& op : report["ops"])
      if (op["name"] == "y") return op["placements"]["outputs"][0].get<std::string>();
    return std::string("missing");
  };
  EXPECT_EQ(pad_output("[0, 0, 1, 0]"), "[S(1)]");
  EXPECT_EQ(pad_output("[1, 0]"), "[R]");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"name": "y", "op": "opaque", "args": [["h"], [4, -8], "float32"]})", "shape sizes must be >= 0, not -8"},
      {R"({"name": "y", "op": "opaque", "args": [["h"], [4194304, 4194304, 4194304, 4194304], "float32"]})",
       "opaque: shape element count"},
      {R"({"name": "y", "op": "opaque", "args": [["h"], [4], "complex64"]})", "complex64"},
      {R"({"name": "y", "op": "pad", "args": ["h", [1, 2, 3]]})", "even number of values"},
      {R"({"name": "y", "op": "pad", "args": ["h", [-600, -600]]})", "does not fit a dim of size 1024"},
      {R"({"name": "y", "op": "pad", "args": ["h", [9223372036854775807, 1]]})", "does not fit"},
  };
  for (const auto& [node, want] : bad) {
    write(node);
    const std::string e = error_of(o);
    EXPECT_NE(e.find(want), std::string::npos) << node << " -> " << e;
    EXPECT_NE(e.find("'y'"), std::string::npos) << e;
  }
}

TEST(PlanCommand, JsonReportSchema) {
  CommandOptions o = small("llama3-8b", "dp=2,tp=4");
  o.format = "json";
  json j = json::parse(run(o));
  ASSERT_TRUE(j["ops"].is_array());
  ASSERT_FALSE(j["ops"].empty());
  bool any_collective = false;
  std::set<std::string> phases;
  for (const json& op : j["ops"]) {
    ASSERT_TRUE(op["name"].is_string());
    ASSERT_TRUE(op["layer"].is_number_integer());
    ASSERT_TRUE(op["op"].is_string());
    ASSERT_TRUE(op["placements"].is_object());
    ASSERT_TRUE(op["placements"]["outputs"].is_array());
    ASSERT_TRUE(op["collectives"].is_array());
    for (const json& c : op["collectives"]) {
      any_collective = true;
      ASSERT_TRUE(c["kind"].is_string());
      ASSERT_TRUE(c["mesh_dim"].is_number_integer());
      ASSERT_TRUE(c["bytes"].is_number_integer());
      ASSERT_TRUE(c["phase"].is_string());
      phases.insert(c["phase"].get<std::string>());
    }
  }
  EXPECT_TRUE(any_collective);
  for (const std::string& p : phases) EXPECT_TRUE(p == "forward" || p == "backward" || p == "optimizer") << p;
  EXPECT_TRUE(phases.count("forward") && phases.count("backward")) << "training plans have both";
  for (const char* k : {"step_time_us", "comm_bytes", "peak_memory_bytes"}) EXPECT_TRUE(j["totals"][k].is_number()) << k;
  EXPECT_TRUE(j["plan_time_ms"].is_number());
  EXPECT_GT(j["totals"]["step_time_us"].get<double>(), 0);
  // Layers carry their index; the layer list summarizes per layer.
  std::set<int> layers;
  for (const json& op : j["ops"]) layers.insert(op["layer"].get<int>());
  EXPECT_EQ(layers, (std::set<int>{-1, 0, 1}));
  EXPECT_TRUE(j["layers"].is_array());
  EXPECT_TRUE(j["baselines"].is_array());
}

TEST(PlanCommand, GraphJsonRoundTripGivesTheSamePlan) {
  for (const char* model : {"gpt2", "llama3-8b", "mixtral-8x7b", "vit-l16", "resnet50"}) {
    SCOPED_TRACE(model);
    CommandOptions o = small(model, "tp=4");
    o.batch = 4;
    o.format = "json";
    o.compare = false;
    std::string path = temp_path(std::string(model) + ".json");
    CommandOptions dump = o;
    dump.dump_graph = path;
    run(dump);
    json a = json::parse(run(o));
    CommandOptions from_file = o;
    from_file.model.clear();
    from_file.graph_file = path;
    json b = json::parse(run(from_file));
    EXPECT_EQ(a["ops"].size(), b["ops"].size());
    EXPECT_NEAR(a["totals"]["step_time_us"].get<double>(), b["totals"]["step_time_us"].get<double>(), 1e-6);
    EXPECT_EQ(a["totals"]["comm_bytes"], b["totals"]["comm_bytes"]);
  }
}

TEST(PlanCommand, TableAndPicture) {
  CommandOptions o = small("gpt2", "dp=2,tp=4");
  o.layers = 3;
  o.dot = temp_path("plan.dot");
  std::string table = run(o);
  // Layer 0 also reduces the embedding's Partial output (where its two consumers take it).
  EXPECT_NE(table.find("layers 1-2 (each)"), std::string::npos) << table;
  EXPECT_NE(table.find("megatron"), std::string::npos);
  EXPECT_NE(table.find("data-parallel"), std::string::npos);
  EXPECT_NE(table.find("greedy"), std::string::npos);
  std::ifstream f(o.dot);
  std::stringstream dot;
  dot << f.rdbuf();
  EXPECT_NE(dot.str().find("digraph"), std::string::npos);
  EXPECT_NE(dot.str().find("layers.0.attn.qkv"), std::string::npos);
  EXPECT_EQ(dot.str().find("layers.1.attn.qkv"), std::string::npos) << "later layers are folded";
  EXPECT_NE(dot.str().find("more layers"), std::string::npos);
}

TEST(PlanCommand, Lists) {
  CommandOptions o;
  o.list_models = o.list_hardware = true;
  std::string s = run(o);
  EXPECT_NE(s.find("llama3-70b"), std::string::npos);
  EXPECT_NE(s.find("70.55B"), std::string::npos) << s;
  EXPECT_NE(s.find("h100-nvlink"), std::string::npos);
}

TEST(PlanCommand, EveryZooModelPlansOnA2dMesh) {
  for (const auto& m : models::zoo()) {
    SCOPED_TRACE(m.name);
    CommandOptions o = small(m.name, "dp=2,tp=2");
    o.format = "json";
    json j = json::parse(run(o));
    EXPECT_GT(j["totals"]["step_time_us"].get<double>(), 0);
  }
}

}  // namespace
}  // namespace dtensor::planner
