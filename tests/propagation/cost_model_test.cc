// The per-kind collective cost model (propagation/hardware.h): old profiles load unchanged, per-kind
// entries override the link's numbers, profiles load from files, bad fields are named.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "dtensor/core/error.h"
#include "gtest/gtest.h"
#include "propagation/cost_model.h"
#include "propagation/hardware.h"

namespace dtensor {
namespace {

std::string profile_text(const std::string& intra) {
  return R"({"name": "test", "ranks_per_host": 4, "links": {"intra_host": )" + intra +
         R"(, "inter_host": {"latency_us": 10, "bandwidth_GBps": 10}},
             "compute": {"peak_tflops": {"float32": 1}, "memory_bandwidth_GBps": 10, "memory_GB": 1}})";
}

TEST(CostModel, RingStepsPerKind) {
  EXPECT_EQ(ring_steps(CommKind::kAllReduce, 4), 6);
  EXPECT_EQ(ring_steps(CommKind::kAllGather, 4), 3);
  EXPECT_EQ(ring_steps(CommKind::kReduceScatter, 8), 7);
  EXPECT_EQ(ring_steps(CommKind::kAllToAll, 2), 1);
  EXPECT_EQ(ring_steps(CommKind::kBroadcast, 3), 2);
  EXPECT_EQ(ring_steps(CommKind::kSendRecv, 8), 1);
  EXPECT_EQ(ring_steps(CommKind::kLocal, 8), 0);
  EXPECT_EQ(ring_steps(CommKind::kAllReduce, 1), 0);
}

TEST(CostModel, ProfileWithoutNewFieldsKeepsItsCosts) {
  // A profile of the old form: latency per ring step only, one bandwidth.
  HardwareProfile p = HardwareProfile::from_json(profile_text(R"({"latency_us": 5, "bandwidth_GBps": 2})"));
  EXPECT_EQ(p.intra_host.base_latency_us, 0.0);
  // all_reduce of 1000 B sent on 4 ranks: 6 steps x 5 us + 1000 B / 2000 B/us.
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 1000, 4, p.intra_host), 30.5);
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kSendRecv, 4000, 4, p.intra_host), 7.0);
}

TEST(CostModel, BaseLatencyAndPerKindModels) {
  HardwareProfile p = HardwareProfile::from_json(profile_text(R"({
      "base_latency_us": 2, "latency_us": 1, "bandwidth_GBps": 4,
      "collectives": {"all_reduce": {"base_latency_us": 10, "latency_us": 0.5, "bandwidth_GBps": 1},
                      "all_gather": {"bandwidth_GBps": 8}}})"));
  // all_reduce: its own model: 10 + 6 x 0.5 + 1000 / 1000.
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 1000, 4, p.intra_host), 14.0);
  // all_gather: its bandwidth, the link's latencies: 2 + 3 x 1 + 8000 / 8000.
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllGather, 8000, 4, p.intra_host), 6.0);
  // broadcast: the link's numbers: 2 + 3 x 1 + 4000 / 4000.
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kBroadcast, 4000, 4, p.intra_host), 6.0);
  EXPECT_EQ(collective_time_us(CommKind::kAllReduce, 1000, 1, p.intra_host), 0.0);
}

TEST(CostModel, MeasuredRangesReplaceTheFormulaForTheirGroupSize) {
  // all_reduce measured on 2 and 4 ranks (dtensor calibrate's by_group_size): 4 ranks flat at 3000 us
  // below 1 MB sent, then 1000 us + bytes / 1 GB/s; 2 ranks one range 100 us + bytes / 2 GB/s.
  HardwareProfile p = HardwareProfile::from_json(profile_text(R"({
      "latency_us": 1, "bandwidth_GBps": 4,
      "collectives": {"all_reduce": {"base_latency_us": 10, "latency_us": 0.5, "bandwidth_GBps": 1,
          "by_group_size": {"4": [{"from_bytes": 0, "latency_us": 3000},
                                  {"from_bytes": 1000000, "latency_us": 1000, "bandwidth_GBps": 1}],
                            "2": [{"from_bytes": 0, "latency_us": 100, "bandwidth_GBps": 2}]}}}})"));
  const LinkModel& l = p.intra_host;
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 0, 4, l), 3000.0);
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 999999, 4, l), 3000.0);
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 1000000, 4, l), 1000.0 + 1000.0);
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 8000000, 4, l), 1000.0 + 8000.0);
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 4000, 2, l), 100.0 + 2.0);
  // 8 ranks were not measured: the kind's formula, 10 + 14 steps x 0.5 + 1000 B / 1 GB/s.
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllReduce, 1000, 8, l), 18.0);
  // Other kinds: the link's numbers, 3 steps x 1 + 4000 B / 4 GB/s.
  EXPECT_DOUBLE_EQ(collective_time_us(CommKind::kAllGather, 4000, 4, l), 4.0);
  EXPECT_EQ(l.model(CommKind::kAllReduce).by_group_size.at(4).size(), 2u);
}

TEST(CostModel, SmallAllReduceOnH100CostsAFewMicroseconds) {
  // 256 B all-reduced on 4 ranks within a host: each sends 2 x 3/4 x 256 = 384 B. NCCL's tuning model
  // (propagation/hardware/h100-nvlink.json): 3.6 us + 6 steps x 0.6 us + 384 B / 360 GB/s.
  const LinkModel& nv = hardware_profile("h100-nvlink").intra_host;
  EXPECT_NEAR(collective_time_us(CommKind::kAllReduce, comm_bytes_sent(CommKind::kAllReduce, 256, 4), 4, nv),
              3.6 + 3.6 + 384.0 / 360e3, 1e-9);
  // Across hosts the network's per-step latency: 3.6 + 2 x 2.7 for 2 hosts, plus 256 B / 45 GB/s.
  const LinkModel& ib = hardware_profile("h100-nvlink").inter_host;
  EXPECT_NEAR(collective_time_us(CommKind::kAllReduce, 256, 2, ib), 3.6 + 5.4 + 256.0 / 45e3, 1e-9);
}

TEST(CostModel, BadFieldsAreNamed) {
  auto message = [](const std::string& intra) {
    try {
      HardwareProfile::from_json(profile_text(intra));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(R"({"latency_us": 1, "bandwidth_GBps": 0})").find("bandwidth_GBps > 0"), std::string::npos);
  EXPECT_NE(message(R"({"latency_us": 1, "bandwidth_GBps": 1, "base_latency_us": -1})").find("base_latency_us"),
            std::string::npos);
  const std::string typo = message(R"({"latency_us": 1, "bandwidth_GBps": 1, "collectives": {"all_raduce": {}}})");
  EXPECT_NE(typo.find("all_raduce"), std::string::npos) << typo;
  EXPECT_NE(typo.find("test.links.intra_host.collectives"), std::string::npos) << typo;
  EXPECT_NE(message(R"({"latency_us": 1, "bandwidth_GBps": 1, "collectives": {"barrier": {}}})").find("has no cost"),
            std::string::npos);
  EXPECT_NE(message(R"({"latency_us": 1, "bandwidth_GBps": 1, "collectives": {"all_reduce": {"bandwidth_GBps": -2}}})")
                .find("collectives.all_reduce"),
            std::string::npos);
  EXPECT_NE(message(R"({"latency_us": 1, "bandwidth_GBps": 1, "collectives": [1]})").find("by kind name"),
            std::string::npos);
  auto ranges = [&](const std::string& by_group) {
    return message(R"({"latency_us": 1, "bandwidth_GBps": 1, "collectives": {"all_gather": {"by_group_size": )" +
                   by_group + "}}}");
  };
  EXPECT_EQ(ranges(R"({"4": [{"from_bytes": 0, "latency_us": 5}]})"), "no error");
  EXPECT_NE(ranges(R"({"four": [{"from_bytes": 0, "latency_us": 5}]})").find("'four' is not a group size"),
            std::string::npos);
  EXPECT_NE(ranges(R"({"1": [{"from_bytes": 0, "latency_us": 5}]})").find("not a group size"), std::string::npos);
  EXPECT_NE(ranges(R"({"4": []})").find("non-empty list"), std::string::npos);
  EXPECT_NE(ranges(R"({"4": [{"from_bytes": 8, "latency_us": 5}]})").find("start at 0"), std::string::npos);
  EXPECT_NE(ranges(R"({"4": [{"from_bytes": 0, "latency_us": 5}, {"from_bytes": 0, "latency_us": 6}]})")
                .find("increase strictly"),
            std::string::npos);
  EXPECT_NE(ranges(R"({"4": [{"from_bytes": 0, "latency_us": 5, "bandwidth_GBps": 0}]})").find("bandwidth_GBps 0"),
            std::string::npos);
  EXPECT_NE(ranges(R"({"4": [{"from_bytes": 0, "latency_us": -1}]})").find("latency_us -1"), std::string::npos);
  const std::string missing = ranges(R"({"4": [{"latency_us": 5}]})");
  EXPECT_NE(missing.find("all_gather.by_group_size.4"), std::string::npos) << missing;
}

TEST(CostModel, ProfilesLoadFromFiles) {
  const std::string path = ::testing::TempDir() + "/cost_model_test_profile.json";
  {
    std::ofstream f(path);
    f << profile_text(R"({"latency_us": 5, "bandwidth_GBps": 2})");
  }
  const HardwareProfile& p = hardware_profile(path);
  EXPECT_EQ(p.name, "test");
  EXPECT_EQ(p.intra_host.latency_us, 5.0);
  EXPECT_EQ(&hardware_profile(path), &p);  // read once: the propagation cache keys by address
  std::remove(path.c_str());
  try {
    hardware_profile(::testing::TempDir() + "/no_such_profile.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_profile.json"), std::string::npos);
  }
  try {
    hardware_profile("h100");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("profile JSON file"), std::string::npos);
  }
}

TEST(CostModel, DefaultHardwareCanBeSet) {
  EXPECT_EQ(&default_hardware(), &hardware_profile(kDefaultHardware));
  set_default_hardware(hardware_profile("cpu-tcp"));
  EXPECT_EQ(default_hardware().name, "cpu-tcp");
  set_default_hardware(hardware_profile(kDefaultHardware));
}

}  // namespace
}  // namespace dtensor
