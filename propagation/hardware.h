// Hardware profiles for the cost model (DESIGN §4): data files in propagation/hardware/*.json,
// compiled into the binary. A profile gives, per link class, an alpha-beta model (latency per hop in
// µs, bandwidth in GB/s = 1e3 bytes/µs) and, for the planner's roofline, peak compute and memory.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"

namespace dtensor {

struct LinkModel {
  double latency_us = 0;      // alpha: per ring hop
  double bandwidth_GBps = 1;  // beta^-1: bytes a rank sends per second, in GB/s
  double bytes_per_us() const { return bandwidth_GBps * 1e3; }
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

// The built-in profiles, by name; throws dtensor::Error listing the known names when absent.
const HardwareProfile& hardware_profile(const std::string& name);
std::vector<std::string> hardware_profile_names();
inline constexpr const char* kDefaultHardware = "h100-nvlink";

}  // namespace dtensor
