// Mixed cluster descriptions (propagation/cluster.h): parsing, hostile input, rank -> host, and the
// link rule against the single profile's links_for_mesh on identical hosts.
#include "propagation/cluster.h"

#include <fstream>
#include <string>

#include "dtensor/core/error.h"
#include "gtest/gtest.h"

namespace dtensor {
namespace {

const HardwareProfile& h100() { return hardware_profile("h100-nvlink"); }
const HardwareProfile& a100() { return hardware_profile("a100-nvlink"); }

TEST(Cluster, ParsesHostsInOrder) {
  Cluster c = Cluster::from_json(
      R"({"hosts": [{"profile": "h100-nvlink", "ranks": 8}, {"profile": "a100-nvlink", "ranks": 4, "count": 2}]})");
  ASSERT_EQ(c.hosts.size(), 3u);
  EXPECT_EQ(c.num_ranks(), 16);
  EXPECT_EQ(&c.profile_of(0), &h100());
  EXPECT_EQ(&c.profile_of(7), &h100());
  EXPECT_EQ(&c.profile_of(8), &a100());
  EXPECT_EQ(c.host_of(11), 1);
  EXPECT_EQ(c.host_of(12), 2);
  EXPECT_EQ(&c.profile_of(15), &a100());
  EXPECT_FALSE(c.homogeneous());
  EXPECT_EQ(c.str(), "8x h100-nvlink + 2 hosts of 4x a100-nvlink");
  EXPECT_THROW(c.host_of(16), Error);
  EXPECT_THROW(c.host_of(-1), Error);
  EXPECT_TRUE(Cluster::uniform(h100(), 2).homogeneous());
}

// Each hostile document fails with a dtensor::Error whose message holds `needle`.
void expect_rejected(const std::string& text, const std::string& needle) {
  SCOPED_TRACE(text);
  try {
    Cluster::from_json(text);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Cluster, RejectsHostileInput) {
  expect_rejected("", "invalid JSON");
  expect_rejected("{\"hosts\": [", "invalid JSON");
  expect_rejected("[]", "expected an object with a list \"hosts\"");
  expect_rejected("{}", "expected an object with a list \"hosts\"");
  expect_rejected(R"({"hosts": {}})", "non-empty list of hosts");
  expect_rejected(R"({"hosts": []})", "non-empty list of hosts");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 8}], "extra": 1})", "unknown field 'extra'");
  expect_rejected(R"({"hosts": [7]})", "hosts[0]: expected an object");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "rank": 8}]})", "hosts[0]: unknown field 'rank'");
  expect_rejected(R"({"hosts": [{"ranks": 8}]})", "hosts[0].profile: expected a string");
  expect_rejected(R"({"hosts": [{"profile": 3, "ranks": 8}]})", "hosts[0].profile: expected a string");
  expect_rejected(R"({"hosts": [{"profile": "tpu-v9", "ranks": 8}]})", "unknown hardware 'tpu-v9'; known:");
  expect_rejected(R"({"hosts": [{"profile": "/no/such/profile.json", "ranks": 8}]})", "hosts[0].profile");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink"}]})", "hosts[0]: missing field 'ranks'");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": "8"}]})", "hosts[0].ranks: expected an integer");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 8.5}]})", "hosts[0].ranks: expected an integer");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": true}]})", "hosts[0].ranks: expected an integer");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 0}]})", "hosts[0].ranks: 0 is out of range");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": -8}]})", "hosts[0].ranks: -8 is out of range");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 9223372036854775807}]})", "out of range");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 18446744073709551615}]})", "out of range");
  // Beyond 64 bits nlohmann reads a float: not an integer.
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 1e30}]})", "expected an integer");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 8, "count": 0}]})", "hosts[0].count: 0 is out");
  // Each count in range, their product and the sum over hosts not.
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 65536, "count": 65536}]})",
                  "more than 65536 ranks");
  expect_rejected(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 65536}, {"profile": "a100-nvlink", "ranks": 1}]})",
                  "hosts[1]: the hosts hold more than 65536");
  // Bytes that are not UTF-8, in a string and outside one.
  expect_rejected("{\"hosts\": [{\"profile\": \"h100\xff\", \"ranks\": 8}]}", "invalid JSON");
  expect_rejected("{\"hosts\": [\xc3]}", "invalid JSON");
}

TEST(Cluster, LoadNamesTheFileAndResolvesProfilesBesideIt) {
  try {
    Cluster::load("/no/such/cluster.json");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cluster file /no/such/cluster.json"), std::string::npos) << e.what();
  }
  const std::string dir = ::testing::TempDir();
  {
    std::ofstream(dir + "/slow.json") << R"({"name": "slow", "ranks_per_host": 2,
      "links": {"intra_host": {"latency_us": 1, "bandwidth_GBps": 10}, "inter_host": {"latency_us": 5, "bandwidth_GBps": 1}},
      "compute": {"peak_tflops": {"bfloat16": 10}, "memory_bandwidth_GBps": 100, "memory_GB": 16}})";
    std::ofstream(dir + "/cluster.json") << R"({"hosts": [{"profile": "slow.json", "ranks": 2}, {"profile": "h100-nvlink", "ranks": 2}]})";
  }
  Cluster c = Cluster::load(dir + "/cluster.json");
  EXPECT_EQ(c.profile_of(0).name, "slow");
  EXPECT_EQ(c.min_memory_GB(), 16.0);
}

TEST(Cluster, MeshMustHaveTheClustersRanks) {
  Cluster c = Cluster::uniform(h100(), 2);
  c.check_mesh({2, 8}, "dp=2,tp=8");
  try {
    c.check_mesh({4, 8}, "dp=4,tp=8");
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 16 ranks but the mesh dp=4,tp=8 has 32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(c.links_for_mesh({8}), Error);
}

// Identical hosts: the group rule gives the profile's own rule (innermost dims within a host).
TEST(Cluster, IdenticalHostsLinkLikeTheProfile) {
  // (Not mesh dims of size 1: they run no collective, and the profile calls one inter-host when
  // the dims inside it span more than a host.)
  for (const Shape& mesh : std::vector<Shape>{{16}, {2, 8}, {4, 4}, {8, 2}, {2, 2, 4}, {4, 2, 2}, {16, 1}}) {
    SCOPED_TRACE(shape_str(mesh));
    EXPECT_EQ(Cluster::uniform(h100(), 2).links_for_mesh(mesh), h100().links_for_mesh(mesh));
  }
  EXPECT_EQ(Cluster::uniform(a100(), 4).links_for_mesh({4, 8}), a100().links_for_mesh({4, 8}));
}

// H100 host + A100 host: tensor-parallel groups stay in a host, the slower host's NVLink prices
// them; data-parallel groups cross hosts on the slower InfiniBand (A100's HDR, 22 GB/s < 45).
TEST(Cluster, MixedHostsUseTheSlowestGroupsLink) {
  Cluster c = Cluster::from_json(R"({"hosts": [{"profile": "h100-nvlink", "ranks": 8}, {"profile": "a100-nvlink", "ranks": 8}]})");
  std::vector<LinkModel> l = c.links_for_mesh({2, 8});
  EXPECT_EQ(l[0], a100().inter_host);
  EXPECT_EQ(l[1], a100().intra_host);
  // tp=16 spans both hosts: inter-host.
  EXPECT_EQ(c.links_for_mesh({16})[0], a100().inter_host);
  // Two H100 hosts then two A100 hosts, dp=4: every dp group touches both kinds.
  Cluster c4 = Cluster::from_json(
      R"({"hosts": [{"profile": "h100-nvlink", "ranks": 8, "count": 2}, {"profile": "a100-nvlink", "ranks": 8, "count": 2}]})");
  l = c4.links_for_mesh({4, 8});
  EXPECT_EQ(l[0], a100().inter_host);
  EXPECT_EQ(l[1], a100().intra_host);
}

}  // namespace
}  // namespace dtensor
