// The fit of `dtensor calibrate` (propagation/collective_fit.h): timings made from a known model are
// fitted back to it.
#include <cmath>
#include <tuple>
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
    // Each group size: one straight range, its latency the formula's base + steps x per-step.
    ASSERT_EQ(fit.by_group_size.size(), 3u);
    for (const auto& [g, ranges] : fit.by_group_size) {
      ASSERT_EQ(ranges.size(), 1u) << comm_kind_name(kind) << " " << g;
      EXPECT_EQ(ranges[0].from_bytes, 0);
      EXPECT_NEAR(ranges[0].latency_us, 40.0 + 15.0 * ring_steps(kind, g), 1e-6) << comm_kind_name(kind) << " " << g;
      EXPECT_NEAR(ranges[0].us_per_byte, 1.0 / 2.5e3, 1e-12) << comm_kind_name(kind) << " " << g;
    }
  }
}

// Timings of `kind` on `g` ranks: flat at `flat_us` for the sizes below `knee` (a buffer size), then
// latency_us + bytes_sent / bw_GBps; sizes 8 B to 32 MiB by 4, each scaled like synthetic's.
std::vector<CollectiveTiming> knee(CommKind kind, int64_t g, double flat_us, int64_t knee_size, double latency_us,
                                   double bw_GBps, double noise = 0) {
  std::vector<CollectiveTiming> out;
  int i = 0;
  for (int64_t size = 8; size <= (int64_t{32} << 20); size *= 4) {
    CollectiveTiming t{kind, g, size, 0};
    const double exact = size < knee_size ? flat_us : latency_us + static_cast<double>(t.bytes_sent()) / (bw_GBps * 1e3);
    t.time_us = exact * (1 + noise * std::sin(2.3 * ++i));
    out.push_back(t);
  }
  return out;
}

TEST(CollectiveFit, RangesRecoverAFlatThenLinearModelPerGroupSize) {
  // As Gloo on an oversubscribed host: small messages cost a group-size-dependent scheduling delay,
  // large ones latency + bytes / bandwidth, with other numbers on each group size.
  const int64_t knee_size = int64_t{2} << 20;  // 2 MiB: 512 KiB is the last flat size
  std::vector<CollectiveTiming> ts = knee(CommKind::kAllGather, 4, 3000, knee_size, 1000, 1.1);
  for (const CollectiveTiming& t : knee(CommKind::kAllGather, 2, 150, knee_size, 400, 0.8)) ts.push_back(t);
  const CollectiveModel fit = fit_collective(ts);
  ASSERT_EQ(fit.by_group_size.size(), 2u);
  for (auto [g, flat, lat, bw] : {std::tuple{4, 3000.0, 1000.0, 1.1}, {2, 150.0, 400.0, 0.8}}) {
    const std::vector<CollectiveSegment>& r = fit.by_group_size.at(g);
    ASSERT_EQ(r.size(), 2u) << g;
    EXPECT_EQ(r[0].from_bytes, 0);
    EXPECT_NEAR(r[0].latency_us, flat, 1e-6 * flat) << g;
    EXPECT_NEAR(r[0].us_per_byte, 0.0, 1e-15) << g;
    // The second range starts between the bytes sent of 512 KiB and of 2 MiB.
    const int64_t lo = comm_bytes_sent(CommKind::kAllGather, int64_t{512} << 10, g);
    const int64_t hi = comm_bytes_sent(CommKind::kAllGather, knee_size, g);
    EXPECT_GT(r[1].from_bytes, lo) << g;
    EXPECT_LE(r[1].from_bytes, hi) << g;
    EXPECT_NEAR(r[1].latency_us, lat, 1e-6 * lat) << g;
    EXPECT_NEAR(1.0 / (r[1].us_per_byte * 1e3), bw, 1e-9 * bw) << g;
  }
  for (const CollectiveTiming& t : ts) EXPECT_NEAR(predicted_time_us(fit, t) / t.time_us, 1.0, 1e-9) << t.size;
}

TEST(CollectiveFit, RangesWithNoiseStayCloseAndALineStaysOneRange) {
  const std::vector<CollectiveTiming> ts = knee(CommKind::kAllReduce, 4, 5000, int64_t{2} << 20, 2000, 1.0, 0.03);
  const CollectiveModel fit = fit_collective(ts);
  for (const CollectiveTiming& t : ts) EXPECT_NEAR(predicted_time_us(fit, t) / t.time_us, 1.0, 0.06) << t.size;
  const std::vector<CollectiveSegment> r = fit_ranges(ts);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_NEAR(1.0 / (r[1].us_per_byte * 1e3), 1.0, 0.1);
  // A straight line with the same noise: the information criterion adds no range.
  const std::vector<CollectiveTiming> line = knee(CommKind::kAllReduce, 4, 0, 0, 200, 1.0, 0.03);
  EXPECT_EQ(fit_ranges(line).size(), 1u);
  EXPECT_THROW(fit_ranges({}), Error);
  EXPECT_THROW(fit_ranges({{CommKind::kAllReduce, 2, 8, 1.0}, {CommKind::kAllReduce, 4, 8, 1.0}}), Error);
}

TEST(CollectiveFit, OneOutlierDoesNotHideAKnee) {
  // Reproducer, measured (bench/calibration/gloo-4ranks-quiet2-fit.json, 2026-11-28): all_gather
  // on 2 Gloo ranks, sizes 8 B to 64 MiB; the first size of the fresh group took 14x its neighbours.
  // With that one timing in the criterion's residuals the fit kept one range and missed 512 KiB to
  // 32 MiB by 26-51%; trimmed, it fits the knee and every size but the outlier within 25%.
  const std::vector<std::pair<int64_t, double>> measured = {
      {8, 2243},         {32, 166},         {128, 158},         {512, 158},        {2048, 153},
      {8192, 153},       {32768, 152},      {131072, 197},      {524288, 317},     {2097152, 2055},
      {8388608, 7574},   {33554432, 26138}, {67108864, 49138}};
  std::vector<CollectiveTiming> ts;
  for (auto [size, us] : measured) ts.push_back({CommKind::kAllGather, 2, size, us});
  const std::vector<CollectiveSegment> r = fit_ranges(ts);
  EXPECT_GE(r.size(), 2u);
  CollectiveModel m;
  m.by_group_size[2] = r;
  for (size_t i = 1; i < ts.size(); ++i) EXPECT_NEAR(predicted_time_us(m, ts[i]) / ts[i].time_us, 1.0, 0.25) << ts[i].size;
  FitOptions untrimmed;
  untrimmed.trimmed_points = 0;
  EXPECT_EQ(fit_ranges(ts, untrimmed).size(), 1u);  // what the criterion chose before
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
