// Fuzzes the planner's graph JSON reader (`dtensor plan --graph`, planner/graph_json.h): every input
// is either a graph or a dtensor::Error naming what is wrong; no other exception, crash or hang. A
// graph that is accepted is written back and read again, and must give the same graph.
#include <string>

#include <algorithm>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "planner/graph_json.h"
#include "tests/fuzz/fuzz_driver.h"

namespace dtensor::planner {
namespace {

// The graph's JSON with its nodes sorted by name: equal for equal graphs whatever the node order.
nlohmann::json canonical(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text);
  auto& nodes = j["nodes"];
  std::sort(nodes.begin(), nodes.end(), [](const nlohmann::json& a, const nlohmann::json& b) {
    return a["name"].get<std::string>() < b["name"].get<std::string>();
  });
  return j;
}

TEST(GraphJsonFuzz, EveryInputIsAGraphOrAnError) {
  std::vector<std::string> corpus = fuzz::read_corpus(
      {"tests/fuzz/corpus/graph_gpt2.json", "tests/fuzz/corpus/graph_resnet50.json", "tests/fuzz/corpus/graph_mixtral.json",
       "tests/fuzz/corpus/graph_imported.json"},
      true);
  ASSERT_EQ(corpus.size(), 4u) << "the fuzz corpus was not found (run from Bazel's runfiles)";
  for (const std::string& g : corpus) ASSERT_NO_THROW(graph_from_json(g)) << "a corpus entry must be a valid graph";
  fuzz::Mutator m(corpus, 20261124);
  fuzz::Counts c =
      fuzz::run_fuzz("graph_json", m, fuzz::fuzz_runs(20000), [](const std::string& in, std::string* why) {
        return fuzz::accept_or_error([&](std::string* bad) {
          const std::string back = graph_to_json(graph_from_json(in));
          if (canonical(graph_to_json(graph_from_json(back))) != canonical(back)) {
            *bad = "writing the graph back and reading it again gives another graph";
            return fuzz::Outcome::kFailed;
          }
          return fuzz::Outcome::kAccepted;
        }, why);
      });
  EXPECT_EQ(c.failed, 0) << c.first_failure;
  EXPECT_GT(c.accepted, 0) << "no input got past the checks: the mutations are too coarse to test anything";
}

}  // namespace
}  // namespace dtensor::planner
