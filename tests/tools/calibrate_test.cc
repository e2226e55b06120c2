// `dtensor calibrate`'s measurement and profile (tools/calibrate.h): a short run on thread ranks
// gives a timing for every group size, kind and size, and its profile loads as --hardware and
// changes explain's costs to exactly the fitted models' (read from the file independently).
#include "tools/calibrate.h"

#include <fstream>

#include "dtensor/collectives/threads_backend.h"
#include "dtensor/core/file_io.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tools/explain.h"

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
  o.ranks = 1;
  EXPECT_NE(message(o).find("--ranks"), std::string::npos);
  o = {};
  o.kinds = {"barrier"};
  EXPECT_NE(message(o).find("not measured"), std::string::npos);
  o = {};
  o.base = "tpu";
  EXPECT_NE(message(o).find("unknown hardware"), std::string::npos);
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
  // A kind's time on 4 ranks from the file's numbers: base + steps x per-step + bytes / bandwidth.
  auto expected_us = [&](const json& collective) {
    const std::string kind = collective["kind"];
    const json& m = fitted[kind];
    const double steps = kind == "all_reduce" ? 6 : kind == "send_recv" ? 1 : 3;
    return m["base_latency_us"].get<double>() + steps * m["latency_us"].get<double>() +
           collective["bytes"].get<double>() / (m["bandwidth_GBps"].get<double>() * 1e3);
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
