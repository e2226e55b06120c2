// `dtensor calibrate`'s measurement and profile (tools/calibrate.h): a short run on thread ranks
// gives a timing for every group size, kind and size, and its profile loads as --hardware and
// changes explain's costs to exactly the fitted models' (read from the file independently).
#include "tools/calibrate.h"

#include <fstream>
#include <tuple>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/core/file_io.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "dispatch/explain.h"

namespace dtensor::tools {
namespace {

using json = nlohmann::json;

TEST(Calibrate, SizesAndGroupSizes) {
  EXPECT_EQ(calibrate_sizes(8, 2048), (std::vector<int64_t>{8, 32, 128, 512, 2048}));
  EXPECT_EQ(calibrate_sizes(8, 4096), (std::vector<int64_t>{8, 32, 128, 512, 2048, 4096}));
  EXPECT_EQ(calibrate_sizes(64, 64), (std::vector<int64_t>{64}));
  const auto big = calibrate_sizes(8, int64_t{256} << 20);
  EXPECT_EQ(big.size(), 14u);  // 8 B .. 128 MiB by 4, then 256 MiB
  EXPECT_EQ(big.back(), int64_t{256} << 20);
  EXPECT_EQ(calibrate_group_sizes(8), (std::vector<int>{8, 4, 2}));
  EXPECT_EQ(calibrate_group_sizes(4), (std::vector<int>{4, 2}));
  EXPECT_EQ(calibrate_group_sizes(6), (std::vector<int>{6, 3}));
  EXPECT_EQ(calibrate_group_sizes(2), (std::vector<int>{2}));
}

TEST(Calibrate, OptionsOutOfRangeAreNamed) {
  auto message = [](CalibrateOptions o) {
    try {
      validate_calibrate_options(o);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CalibrateOptions o;
  EXPECT_EQ(message(o), "no error");
  o.backend = "mpi";
  EXPECT_NE(message(o).find("--backend 'mpi'"), std::string::npos);
  o = {};
  o.min_bytes = 2;
  EXPECT_NE(message(o).find("--sizes"), std::string::npos);
  o = {};
  o.max_bytes = int64_t{2} << 30;
  EXPECT_NE(message(o).find("out of range"), std::string::npos);
  o = {};
  o.min_bytes = 1024;
  o.max_bytes = 64;
  EXPECT_NE(message(o).find("above max"), std::string::npos);
  o = {};
  o.iters = 0;
  EXPECT_NE(message(o).find("--iters"), std::string::npos);
  o = {};
  o.rounds = 0;
  EXPECT_NE(message(o).find("--rounds 0"), std::string::npos);
  o = {};
  o.ranks = 1;
  EXPECT_NE(message(o).find("--ranks"), std::string::npos);
  o = {};
  o.kinds = {"barrier"};
  EXPECT_NE(message(o).find("not measured"), std::string::npos);
  o = {};
  o.base = "tpu";
  EXPECT_NE(message(o).find("unknown hardware"), std::string::npos);
}

TEST(Calibrate, ProfileJsonRoundTripsTheFittedRanges) {
  // Timings from a known piecewise model (flat, then linear) on 4 and 2 ranks, written and loaded back.
  std::vector<CollectiveTiming> ts;
  for (auto [g, flat, lat, bw] : {std::tuple{4, 2500.0, 900.0, 1.2}, {2, 120.0, 300.0, 0.9}})
    for (int64_t size = 8; size <= (int64_t{32} << 20); size *= 4) {
      CollectiveTiming t{CommKind::kAllToAll, g, size, 0};
      t.time_us = size < (int64_t{2} << 20) ? flat : lat + static_cast<double>(t.bytes_sent()) / (bw * 1e3);
      ts.push_back(t);
    }
  const CollectiveModel fit = fit_collective(ts);
  const HardwareProfile p = HardwareProfile::from_json(
      calibrated_profile_json(ts, hardware_profile("cpu-tcp"), "round-trip", "synthetic", 4));
  const CollectiveModel loaded = p.intra_host.model(CommKind::kAllToAll);
  EXPECT_EQ(loaded.base_latency_us, fit.base_latency_us);
  EXPECT_EQ(loaded.bandwidth_GBps, fit.bandwidth_GBps);
  ASSERT_EQ(loaded.by_group_size.size(), 2u);
  for (int64_t g : {2, 4}) {
    const auto& want = fit.by_group_size.at(g);
    const auto& got = loaded.by_group_size.at(g);
    ASSERT_EQ(got.size(), 2u) << g;
    ASSERT_EQ(got.size(), want.size()) << g;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].from_bytes, want[i].from_bytes) << g << " " << i;
      EXPECT_EQ(got[i].latency_us, want[i].latency_us) << g << " " << i;
      EXPECT_NEAR(got[i].us_per_byte, want[i].us_per_byte, 1e-12 * want[i].us_per_byte) << g << " " << i;
    }
  }
  // The loaded profile predicts the synthetic timings (hand-set above) exactly.
  for (const CollectiveTiming& t : ts)
    EXPECT_NEAR(p.intra_host.time_us(t.kind, t.bytes_sent(), t.group_size), t.time_us, 1e-6 * t.time_us) << t.size;
}

TEST(Calibrate, ThreadRanksMeasureEveryKindAndTheProfileChangesExplainCosts) {
  CalibrateOptions o;
  o.min_bytes = 8;
  o.max_bytes = 2048;
  o.iters = 2;
  o.warmup = 1;
  std::vector<CollectiveTiming> timings;
  run_threads(4, [&](std::shared_ptr<Backend> b) {
    auto t = measure_collectives(*b, o, cpu());
    if (b->rank() == 0) timings = std::move(t);
  });
  // Group sizes 4 and 2, six kinds, sizes 8, 32, 128, 512, 2048.
  ASSERT_EQ(timings.size(), 2u * 6u * 5u);
  for (const CollectiveTiming& t : timings) {
    EXPECT_TRUE(t.group_size == 4 || t.group_size == 2);
    EXPECT_GT(t.time_us, 0.0);
  }
  const std::string text = calibrated_profile_json(timings, hardware_profile("cpu-tcp"), "calibrated-test",
                                                   "test run", 4);
  const std::string path = ::testing::TempDir() + "/calibrate_test_profile.json";
  write_file_atomic(path, text);

  // The file, read independently of the loader.
  const json j = json::parse(text);
  const json& fitted = j["links"]["intra_host"]["collectives"];
  ASSERT_EQ(fitted["all_reduce"]["measured"].size(), 10u);
  for (const char* k : {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"}) {
    ASSERT_TRUE(fitted.contains(k)) << k;
    EXPECT_GT(fitted[k]["bandwidth_GBps"].get<double>(), 0.0) << k;
  }
  // A kind's time on 4 ranks from the file's numbers: the range of by_group_size["4"] holding the
  // bytes, latency + bytes / bandwidth (4 ranks were measured, so the formula is not used).
  auto expected_us = [&](const json& collective) {
    const std::string kind = collective["kind"];
    const double bytes = collective["bytes"].get<double>();
    const json* range = nullptr;
    for (const json& r : fitted[kind]["by_group_size"]["4"])
      if (r["from_bytes"].get<double>() <= bytes) range = &r;
    EXPECT_NE(range, nullptr) << kind;
    if (!range) return 0.0;
    const double bw = range->value("bandwidth_GBps", 0.0);
    return (*range)["latency_us"].get<double>() + (bw > 0 ? bytes / (bw * 1e3) : 0.0);
  };

  // explain with --hardware FILE: a P(sum) into exp (which needs the sum) and an mm of two Shard(0)
  // inputs on 4 ranks: every collective is costed by the file's models.
  ExplainOptions with_file;
  with_file.hardware = path;
  for (const std::string request :
       {R"j({"mesh": [4], "op": "exp", "args": [{"shape": [16, 8], "placements": ["P(sum)"]}], "kwargs": {}})j",
        R"j({"mesh": [4], "op": "mm", "args": [{"shape": [16, 8], "placements": ["S(0)"]},
                                                {"shape": [8, 4], "placements": ["S(0)"]}], "kwargs": {}})j"}) {
    const json calibrated = json::parse(explain_line(request, with_file));
    const json nvlink = json::parse(explain_line(request));
    ASSERT_FALSE(calibrated.contains("error")) << calibrated.dump();
    ASSERT_GE(calibrated["collectives"].size(), 1u) << calibrated.dump();
    double want = 0;
    for (const json& c : calibrated["collectives"]) want += expected_us(c);
    EXPECT_NEAR(calibrated["cost_us"].get<double>(), want, 0.005) << calibrated.dump();  // explain prints 0.01 us
    EXPECT_NE(calibrated["cost_us"].get<double>(), nvlink["cost_us"].get<double>());
  }
}

}  // namespace
}  // namespace dtensor::tools
