// The fit of `dtensor calibrate` (propagation/collective_fit.h): timings made from a known model are
// fitted back to it.
#include <cmath>
#include <vector>

#include "dtensor/core/error.h"
#include "gtest/gtest.h"
#include "propagation/collective_fit.h"

namespace dtensor {
namespace {

// Timings of `kind` from base + per_step * steps + bytes_sent / bw, on sizes 8 B to 64 MiB by 4 and
// the given group sizes, each time scaled by 1 + noise * (a fixed pattern in [-1, 1]).
std::vector<CollectiveTiming> synthetic(CommKind kind, const CollectiveModel& m, const std::vector<int64_t>& groups,
                                        double noise = 0) {
  std::vector<CollectiveTiming> out;
  int i = 0;
  for (int64_t g : groups)
    for (int64_t size = 8; size <= (int64_t{64} << 20); size *= 4) {
      CollectiveTiming t{kind, g, size, 0};
      const double pattern = std::sin(1.7 * ++i);
      t.time_us = (m.base_latency_us + m.latency_us * ring_steps(kind, g) +
                   static_cast<double>(t.bytes_sent()) / (m.bandwidth_GBps * 1e3)) *
                  (1 + noise * pattern);
      out.push_back(t);
    }
  return out;
}

TEST(CollectiveFit, RecoversAKnownModelFromSeveralGroupSizes) {
  for (CommKind kind : {CommKind::kAllReduce, CommKind::kAllGather, CommKind::kReduceScatter, CommKind::kAllToAll,
                        CommKind::kBroadcast}) {
    const CollectiveModel truth{40.0, 15.0, 2.5};
    const CollectiveModel fit = fit_collective(synthetic(kind, truth, {2, 4, 8}));
    EXPECT_NEAR(fit.bandwidth_GBps, truth.bandwidth_GBps, 1e-6 * truth.bandwidth_GBps) << comm_kind_name(kind);
    EXPECT_NEAR(fit.base_latency_us, truth.base_latency_us, 1e-6) << comm_kind_name(kind);
    EXPECT_NEAR(fit.latency_us, truth.latency_us, 1e-6) << comm_kind_name(kind);
  }
}

TEST(CollectiveFit, OneGroupSizeGivesAllLatencyToTheBase) {
  // steps cannot be told apart from the base: all of it is base (all_reduce on 4 ranks: 6 steps).
  const CollectiveModel fit = fit_collective(synthetic(CommKind::kAllReduce, {40.0, 15.0, 2.5}, {4}));
  EXPECT_NEAR(fit.base_latency_us, 40.0 + 6 * 15.0, 1e-6);
  EXPECT_EQ(fit.latency_us, 0.0);
  EXPECT_NEAR(fit.bandwidth_GBps, 2.5, 1e-6);
  // send_recv has one step whatever the group.
  const CollectiveModel p2p = fit_collective(synthetic(CommKind::kSendRecv, {30.0, 0.0, 1.0}, {2, 4}));
  EXPECT_NEAR(p2p.base_latency_us, 30.0, 1e-6);
  EXPECT_NEAR(p2p.bandwidth_GBps, 1.0, 1e-6);
}

TEST(CollectiveFit, NoisyTimingsStayClose) {
  const CollectiveModel truth{50.0, 10.0, 1.2};
  const std::vector<CollectiveTiming> ts = synthetic(CommKind::kAllReduce, truth, {2, 4}, 0.03);
  const CollectiveModel fit = fit_collective(ts);
  EXPECT_NEAR(fit.bandwidth_GBps, truth.bandwidth_GBps, 0.05 * truth.bandwidth_GBps);
  // Latency as a whole (base + steps) within 10% for each group size.
  for (int64_t g : {2, 4}) {
    const double want = truth.base_latency_us + truth.latency_us * ring_steps(CommKind::kAllReduce, g);
    const double got = fit.base_latency_us + fit.latency_us * ring_steps(CommKind::kAllReduce, g);
    EXPECT_NEAR(got, want, 0.1 * want) << g;
  }
  // Every prediction within twice the noise.
  for (const CollectiveTiming& t : ts) EXPECT_NEAR(predicted_time_us(fit, t) / t.time_us, 1.0, 0.06) << t.size;
}

TEST(CollectiveFit, NegativeLatencyIsClampedAtZero) {
  // Pure bandwidth (no latency at all): nothing negative comes out.
  const CollectiveModel fit = fit_collective(synthetic(CommKind::kAllGather, {0.0, 0.0, 3.0}, {2, 4}, 0.01));
  EXPECT_GE(fit.base_latency_us, 0.0);
  EXPECT_GE(fit.latency_us, 0.0);
  EXPECT_NEAR(fit.bandwidth_GBps, 3.0, 0.1);
}

TEST(CollectiveFit, BadTimingsAreRejected) {
  EXPECT_THROW(fit_collective({}), Error);
  EXPECT_THROW(fit_collective({{CommKind::kAllReduce, 2, 8, 1.0}, {CommKind::kAllGather, 2, 8, 1.0}}), Error);
  EXPECT_THROW(fit_collective({{CommKind::kAllReduce, 2, 8, 0.0}}), Error);
  EXPECT_THROW(fit_collective({{CommKind::kAllReduce, 2, 8, NAN}}), Error);
  EXPECT_THROW(fit_collective({{CommKind::kAllReduce, 1, 8, 1.0}}), Error);
}

}  // namespace
}  // namespace dtensor
