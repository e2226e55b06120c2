// Fuzzes `dtensor explain`'s request handling (dispatch/explain.h): every input, valid or not, must get
// exactly one JSON object line back, never an exception, a crash or a hang. Under the ASan+UBSan
// build (scripts/sanitize.sh) the same run also catches memory and undefined-behaviour errors.
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/fuzz/fuzz_driver.h"
#include "dispatch/explain.h"

namespace dtensor::tools {
namespace {

TEST(ExplainFuzz, EveryInputGetsOneJsonAnswer) {
  std::vector<std::string> corpus =
      fuzz::read_corpus({"tests/fuzz/corpus/explain.jsonl", "tests/conformance/public.jsonl"}, false);
  ASSERT_GE(corpus.size(), 20u) << "the fuzz corpus was not found (run from Bazel's runfiles)";
  fuzz::Mutator m(corpus, 20261124);
  ExplainOptions opt;
  // Executed requests stay small so the run is bounded; the limits themselves are checked too.
  opt.max_run_ranks = 8;
  opt.max_run_bytes = int64_t{1} << 22;
  opt.timeout = std::chrono::seconds(20);
  fuzz::Counts c = fuzz::run_fuzz("explain", m, fuzz::fuzz_runs(20000), [&](const std::string& in, std::string* why) {
    std::string out;
    try {
      out = explain_line(in, opt);
    } catch (const std::exception& e) {
      *why = std::string("explain_line threw: ") + e.what();
      return fuzz::Outcome::kFailed;
    }
    if (out.find('\n') != std::string::npos) {
      *why = "the answer spans lines: " + out;
      return fuzz::Outcome::kFailed;
    }
    nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      *why = "the answer is not a JSON object: " + out;
      return fuzz::Outcome::kFailed;
    }
    if (j.contains("error")) return fuzz::Outcome::kRejected;
    if (j.contains("match") && j["match"] == false) {  // an executed op that disagrees with one device
      *why = "a sharded run disagrees with the single-device op: " + out;
      return fuzz::Outcome::kFailed;
    }
    return fuzz::Outcome::kAccepted;
  });
  EXPECT_EQ(c.failed, 0) << c.first_failure;
  EXPECT_GT(c.accepted, 0) << "no input got past the checks: the mutations are too coarse to test anything";
}

}  // namespace
}  // namespace dtensor::tools
