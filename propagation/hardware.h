// Hardware profiles for the cost model (DESIGN §4): data files in propagation/hardware/*.json,
// compiled into the binary, or a JSON file of the same form (`dtensor calibrate --out FILE` writes
// one). A profile gives, per link class, the time of each collective kind and, for the planner's
// roofline, peak compute and memory.
//
// Collective time on a link (µs), for a group of n ranks where each rank sends `bytes`
// (comm_bytes_sent, dtensor/collectives/comm_kind.h):
//     time = base_latency_us + latency_us * steps(kind, n) + bytes / bandwidth
// steps: the ring algorithm's sequential steps, 2(n-1) for all_reduce, n-1 for all_gather,
// reduce_scatter, all_to_all and broadcast, 1 for send_recv. This is the form of NCCL's own tuning
// model (src/graph/tuning.cc: latency = baseLat + nsteps * hwLat, time = latency + bytes / bw).
// `bandwidth` is the bus bandwidth of nccl-tests (doc/PERFORMANCE.md): busbw = algbw * factor with
// factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and all_to_all, 1 for
// broadcast and send_recv, which is exactly bytes / time for comm_bytes_sent's bytes.
//
// JSON, per link ("links": {"intra_host": {...}, "inter_host": {...}}):
//   "latency_us"       µs per ring step (alpha). Required.
//   "bandwidth_GBps"   bus bandwidth in GB/s = 1e3 bytes/µs. Required, > 0.
//   "base_latency_us"  µs per collective call, whatever the group size: launch and synchronisation,
//                      the small-message term. Optional, default 0 (profiles before it charged
//                      latency per step only and still load unchanged).
//   "collectives"      optional, by kind name ("all_reduce", "all_gather", "reduce_scatter",
//                      "all_to_all", "broadcast", "send_recv"): {"base_latency_us", "latency_us",
//                      "bandwidth_GBps"}, each optional, defaulting to the link's: a fitted model per
//                      kind (dtensor calibrate). Other keys of an entry ("fit", "measured") are
//                      ignored by the loader.
//   "collectives".KIND."by_group_size"  optional (dtensor calibrate writes it): by group size ("2",
//                      "4", ...), a list of message-size ranges [{"from_bytes", "latency_us",
//                      "bandwidth_GBps"}, ...], from_bytes (bytes a rank sends) strictly increasing
//                      from 0; a range holds up to the next one's from_bytes and costs
//                          time = latency_us + bytes / bandwidth_GBps
//                      (bandwidth_GBps absent: the range's time does not grow with the bytes). For a
//                      group size listed there, it replaces the kind's formula above; other group
//                      sizes keep the formula. Profiles without it load unchanged, and loaders
//                      before it ignore it (unknown keys of an entry are ignored).
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dtensor/collectives/comm_kind.h"
#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"

namespace dtensor {

// One message-size range of a measured model (by_group_size above): from `from_bytes` (bytes a rank
// sends) up to the next range's, time = latency_us + bytes * us_per_byte (us_per_byte = 1 / (1e3 *
// bandwidth_GBps), 0 when the range's time does not grow with the bytes).
struct CollectiveSegment {
  int64_t from_bytes = 0;
  double latency_us = 0;
  double us_per_byte = 0;
  bool operator==(const CollectiveSegment&) const = default;
};

// The ring's sequential steps for `kind` over n ranks (see above); 0 for local, barrier or n <= 1.
int64_t ring_steps(CommKind kind, int64_t n);

// One collective kind's cost on a link: base + per-step latency (µs) and bus bandwidth (GB/s), and,
// for the group sizes that were measured, the ranges fitted to them.
struct CollectiveModel {
  double base_latency_us = 0;
  double latency_us = 0;
  double bandwidth_GBps = 1;
  // By group size: ranges sorted by from_bytes, the first from 0 (checked by from_json).
  std::map<int64_t, std::vector<CollectiveSegment>> by_group_size = {};

  double bytes_per_us() const { return bandwidth_GBps * 1e3; }
  // Time in µs of the collective of `kind` over `n` ranks where each rank sends `bytes`: the range
  // of by_group_size[n] holding `bytes` when n was measured, else the formula.
  double time_us(CommKind kind, int64_t bytes, int64_t n) const;
  bool operator==(const CollectiveModel&) const = default;
};

struct LinkModel {
  double base_latency_us = 0;  // per collective call
  double latency_us = 0;       // alpha: per ring step
  double bandwidth_GBps = 1;   // beta^-1: bus bandwidth, bytes a rank sends per second, in GB/s
  // Per-kind models that replace the three numbers above for that kind (indexed by CommKind).
  std::array<std::optional<CollectiveModel>, kNumCommKinds> collectives{};

  double bytes_per_us() const { return bandwidth_GBps * 1e3; }
  // The model `kind` uses on this link: its own entry, else the link's numbers.
  CollectiveModel model(CommKind kind) const;
  // model(kind).time_us(kind, bytes, n), without copying the model.
  double time_us(CommKind kind, int64_t bytes, int64_t n) const;
  bool operator==(const LinkModel&) const = default;
};

struct HardwareProfile {
  std::string name, description, sources;
  int ranks_per_host = 1;
  LinkModel intra_host, inter_host;
  std::map<std::string, double> peak_tflops;  // by dtype name (and "tf32")
  double memory_bandwidth_GBps = 0;
  double memory_GB = 0;

  // The link each mesh dim's groups use: mesh dims are laid out row-major over ranks, so the
  // innermost dims whose sizes multiply to at most ranks_per_host stay within a host.
  std::vector<LinkModel> links_for_mesh(const Shape& mesh_shape) const;
  double peak_flops_per_us(DType dtype) const;  // FLOP per µs

  // Parses a profile; throws dtensor::Error naming the missing or malformed field.
  static HardwareProfile from_json(const std::string& text);
};

// A built-in profile by name, or a profile JSON file by path (a name holding '/' or ending in
// ".json"; read once per path and kept for the process's life, so the reference stays valid and
// the propagation cache, keyed by profile address, keeps its entries). Throws dtensor::Error listing
// the known names when `name` is neither, or naming the file and the field when the file cannot be
// read or parsed.
const HardwareProfile& hardware_profile(const std::string& name_or_file);
std::vector<std::string> hardware_profile_names();
inline constexpr const char* kDefaultHardware = "h100-nvlink";

// The profile propagation uses when a call names none: hardware_profile(kDefaultHardware) unless
// set_default_hardware named another (`dtensor train --hardware`). Thread-safe.
const HardwareProfile& default_hardware();
void set_default_hardware(const HardwareProfile& profile);

}  // namespace dtensor
