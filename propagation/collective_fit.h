// Fitting the cost model of one collective kind (propagation/hardware.h: time = base_latency_us +
// latency_us * ring_steps(kind, n) + bytes_sent / bandwidth) to measured timings, for `dtensor
// calibrate`.
//
// The fit, in two least-squares steps (as nccl-tests is read: bandwidth from the large sizes, where
// latency is negligible, and latency from the small ones, where bandwidth is). Every squared error
// is weighted by 1 / time^2, i.e. relative errors are minimised, so that each size counts alike
// (plain least squares lets the largest buffer alone set the bandwidth):
//   1. bandwidth: least squares of time on bytes_sent over the timings whose buffer is at least
//      bandwidth_min_bytes (when fewer than two distinct sizes are that large: the two largest
//      sizes), with one intercept per group size (each has its own latency) and one common slope;
//      bandwidth = 1 / slope. A slope <= 0 (noise on a flat curve) falls back to the largest
//      timing's bytes_sent / time.
//   2. latency: the residuals time - bytes_sent / bandwidth of the timings whose buffer is at most
//      latency_max_bytes (when none: the smallest size) are fitted by (weighted) least squares to
//      base_latency_us + latency_us * steps, both >= 0 (non-negative least squares on two unknowns:
//      the unconstrained solution when both are >= 0, else the better of base only and per-step
//      only). With one distinct step count (one group size) the two cannot be told apart: all of
//      it is base_latency_us and latency_us is 0.
//
// Then, per group size (FitOptions::by_group_size), message-size ranges (CollectiveModel::
// by_group_size, hardware.h): the timings of one group size, in order of bytes sent, are split into
// at most max_ranges runs of consecutive sizes (at least min_range_points each), each fitted by the
// same relative least squares to latency_us + bytes_sent * us_per_byte, both >= 0. Why: Gloo (and
// NCCL) change algorithm and protocol with the group and the message size, and on an
// oversubscribed host a small message costs a scheduling delay that depends on the group size, so
// one line over all group sizes and sizes misses (BENCHMARKS.md, "Measured cost model"). The
// number of ranges is the one with the least Bayesian information criterion, N ln(RSS / N) + p ln N
// (RSS the sum of squared relative errors, N the timings, p = 3 x ranges - 1 parameters): a range is
// added only when the data says so. RSS and N leave out the trimmed_points worst timings (least
// trimmed squares): one timing 10x off its neighbours would otherwise dominate every candidate's RSS
// alike and keep the criterion from adding the ranges the other sizes need (held out on the
// 2026-11-28 quiet pair: 59 -> 67 of 72 timings within +-25%; BENCHMARKS.md). A range starts (from_bytes) at the geometric mean of the bytes
// sent of the last timing before it and its first timing; the first starts at 0.
#pragma once

#include <cstdint>
#include <vector>

#include "dtensor/collectives/comm_kind.h"
#include "propagation/hardware.h"

namespace dtensor {

// One measurement: a collective of `kind` over `group_size` ranks on a buffer of `size` bytes (the
// group bytes of comm_kind.h's comm_bytes_sent: all_reduce's tensor, all_gather's output,
// reduce_scatter's input, the sum of all_to_all's inputs, the broadcast tensor, the message) took
// `time_us` (µs).
struct CollectiveTiming {
  CommKind kind = CommKind::kAllReduce;
  int64_t group_size = 2;
  int64_t size = 0;
  double time_us = 0;
  int64_t bytes_sent() const { return comm_bytes_sent(kind, size, group_size); }
};

struct FitOptions {
  int64_t bandwidth_min_bytes = int64_t{1} << 20;  // 1 MiB
  int64_t latency_max_bytes = int64_t{4} << 10;    // 4 KiB
  bool by_group_size = true;                       // also fit each group size's message-size ranges
  int max_ranges = 3;
  int min_range_points = 3;
  int trimmed_points = 1;  // left out of the information criterion's residuals (the worst ones)
};

// Fits one kind's model to `timings` (all of that kind, group sizes >= 2, times > 0). Throws
// dtensor::Error when there are none, kinds are mixed, or a timing is not finite and > 0.
CollectiveModel fit_collective(const std::vector<CollectiveTiming>& timings, const FitOptions& options = {});

// The message-size ranges of one group size's timings, as described above. Throws dtensor::Error
// when there are none, or they mix kinds or group sizes, or a time is not finite and > 0.
std::vector<CollectiveSegment> fit_ranges(const std::vector<CollectiveTiming>& timings, const FitOptions& options = {});

// The model's time for a timing's collective, in µs (CollectiveModel::time_us).
double predicted_time_us(const CollectiveModel& model, const CollectiveTiming& t);

}  // namespace dtensor
