// `dtensor calibrate`: measures the collectives of a backend on this machine and writes a hardware
// profile (propagation/hardware.h) whose per-kind models are fitted to the measurements
// (propagation/collective_fit.h), so that `explain`, `plan` and `train` can cost plans with
// `--hardware FILE`.
//
// Measurement, in the manner of nccl-tests: for each group size (the whole world, then halves down
// to 2: the contiguous blocks that the inner dims of a mesh form, all blocks running at once), in
// `rounds` rounds each visiting every kind and size once (float32 buffers; uneven splits where a
// size does not divide), every rank runs `warmup` untimed calls, then timed samples, each after a
// barrier of the whole world: up to `iters` in all rounds together, fewer for large sizes so that one
// size takes about `budget_s` in all (at least kMinIters). A sample is a run of back-to-back calls
// lasting about 20 ms (one call for large sizes; up to 100 for small ones, as nccl-tests averages a
// loop of calls), its time the average call; a sample's time is its slowest rank's, and the timing
// is the median sample of all rounds. Rounds spread a drift of a shared machine's load over every
// size instead of biasing the sizes measured while it lasted.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"
#include "propagation/collective_fit.h"
#include "propagation/hardware.h"

namespace dtensor::tools {

struct CalibrateOptions {
  std::string backend = "threads";  // threads, gloo or nccl
  int ranks = 4;                    // thread ranks (threads backend only)
  std::string out;                  // profile JSON to write (rank 0, atomically)
  int64_t min_bytes = 8;            // buffer sizes: min_bytes * 4^k up to max_bytes, and max_bytes
  int64_t max_bytes = int64_t{64} << 20;
  int iters = 20;                   // most timed samples per size
  int warmup = 2;
  double budget_s = 0.5;            // wall time one (group size, kind, size) aims at, all rounds
  int rounds = 3;                   // passes over every (kind, size); see above
  std::vector<std::string> kinds;   // collective kinds; empty: all of kCalibratedKinds
  std::string base;                 // profile giving compute and inter-host links; empty: by backend
  std::string name;                 // the written profile's name; empty: "calibrated-<backend>"
};

inline constexpr CommKind kCalibratedKinds[] = {CommKind::kAllReduce, CommKind::kAllGather,
                                                CommKind::kReduceScatter, CommKind::kAllToAll,
                                                CommKind::kBroadcast, CommKind::kSendRecv};
inline constexpr int kMinIters = 3;
inline constexpr int64_t kMinCalibrateBytes = 4;                     // one float32
inline constexpr int64_t kMaxCalibrateBytes = int64_t{1} << 30;      // 1 GiB per buffer
inline constexpr int kMaxCalibrateIters = 100000;
inline constexpr int kMaxCalibrateRounds = 100;
inline constexpr int kMaxCalibrateRanks = 64;  // thread ranks: each holds its own buffers

// Checks the options (sizes in [kMinCalibrateBytes, kMaxCalibrateBytes], min <= max, multiples of 4;
// iters in [1, kMaxCalibrateIters], warmup >= 0, budget > 0, rounds in [1, kMaxCalibrateRounds],
// ranks in [2, kMaxCalibrateRanks] for threads, known kinds, a known --base); throws dtensor::Error
// naming the flag and what is accepted.
void validate_calibrate_options(const CalibrateOptions& o);

// The buffer sizes measured: min * 4^k <= max, then max when it is not one of them.
std::vector<int64_t> calibrate_sizes(int64_t min_bytes, int64_t max_bytes);

// The group sizes measured on a world of n ranks: n, n/2, n/4, ... while even, down to 2.
std::vector<int> calibrate_group_sizes(int world_size);

// Runs the measurement on this rank (collective: every rank of `backend`'s world calls it with the
// same options) with buffers on `device`. Returns the timings (the same on every rank).
std::vector<CollectiveTiming> measure_collectives(Backend& backend, const CalibrateOptions& o, Device device);

// The profile JSON for `timings`: `base`'s compute and inter-host link, an intra-host link of
// `ranks_per_host` ranks with one fitted model per measured kind (all_reduce's also as the link's
// own numbers, for kinds not measured) and its "by_group_size" ranges (propagation/hardware.h), and
// the measurements themselves under each kind's "measured" (ignored by the loader).
std::string calibrated_profile_json(const std::vector<CollectiveTiming>& timings, const HardwareProfile& base,
                                    const std::string& name, const std::string& description, int ranks_per_host,
                                    const FitOptions& fit = {});

// The measurements a calibrated profile keeps (links.intra_host.collectives.KIND.measured: ranks,
// size, time_us), to fit again (`dtensor calibrate --refit FILE`). Throws dtensor::Error naming the
// field when the text is not such a profile.
std::vector<CollectiveTiming> measured_timings(const std::string& profile_json);

// An nccl-tests-like table of the timings against `link`'s models: kind, ranks, size (B), time
// (µs), algbw and busbw (GB/s), predicted time (µs), error (%).
void print_calibration_table(const std::vector<CollectiveTiming>& timings, const LinkModel& link, std::ostream& out);

}  // namespace dtensor::tools
