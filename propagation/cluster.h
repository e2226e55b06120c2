// A mixed cluster: hosts in order, each with its own hardware profile
// (propagation/hardware.h) and number of ranks. Global ranks are numbered host after host (host 0's
// ranks first), and a mesh is laid out row-major over global ranks (DESIGN §2), so rank r's
// profile is the profile of the host holding r.
//
// JSON ("dtensor plan --cluster FILE"):
//   {"hosts": [{"profile": "h100-nvlink", "ranks": 8}, {"profile": "a100-nvlink", "ranks": 8, "count": 2}]}
//   "profile"  a built-in profile name (dtensor plan --list-hardware) or a profile JSON file; a
//              relative path is taken relative to the cluster file's folder. Required.
//   "ranks"    ranks (devices) on the host, an integer in [1, kMaxClusterRanks]. Required.
//   "count"    that many identical hosts in a row, an integer in [1, kMaxClusterRanks]. Optional, 1.
// Other keys are rejected (a misspelt key would otherwise be silently ignored); the whole cluster
// holds at most kMaxClusterRanks ranks.
//
// Links (links_for_mesh): a group of a mesh dim (the ranks that differ only in that dim's
// coordinate) whose ranks are all on one host uses that host's intra_host link; a group that spans
// hosts uses the slowest inter_host link of the hosts it touches. A mesh dim's groups run at once
// and the collective ends with the slowest group, so the mesh dim is priced on its slowest group's
// link. "Slower" compares the time of an all_reduce of kLinkProbeBytes bytes over the group size
// (bandwidth-bound), ties broken by the time of an 8-byte one (latency-bound).
// On a cluster of identical hosts with power-of-two sizes this is exactly
// HardwareProfile::links_for_mesh (the innermost mesh dims that fit in a host are intra-host), except
// on mesh dims of size 1, which run no collective (here intra-host, there as the dims inside them).
//
// Errors: dtensor::Error naming the field (e.g. "cluster hosts[1].ranks") and what is accepted, for
// invalid JSON, a missing or wrongly typed field, a count out of range, an unknown profile (listing
// the known names), an unreadable file, and, in links_for_mesh / check_mesh, a mesh whose size is
// not the cluster's rank count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/core/dtype.h"
#include "dtensor/core/shape.h"
#include "propagation/hardware.h"

namespace dtensor {

inline constexpr int64_t kMaxClusterRanks = 65536;  // the planner's largest mesh
inline constexpr int64_t kLinkProbeBytes = int64_t{64} << 20;

struct ClusterHost {
  std::string profile_name;               // as written in the file
  const HardwareProfile* profile = nullptr;  // hardware_profile(profile_name): lives for the process
  int64_t ranks = 0;
};

struct Cluster {
  std::vector<ClusterHost> hosts;  // "count" expanded: one entry per host

  int64_t num_ranks() const;
  int64_t host_of(int64_t rank) const;  // rank in [0, num_ranks()); checked
  const HardwareProfile& profile_of(int64_t rank) const { return *hosts[host_of(rank)].profile; }
  bool homogeneous() const;  // every host has the same profile (by address)
  // Throws naming the mesh when numel(mesh_shape) != num_ranks().
  void check_mesh(const Shape& mesh_shape, const std::string& mesh_str) const;
  // The link each mesh dim's collectives are priced on (rule above). Checks the mesh first.
  std::vector<LinkModel> links_for_mesh(const Shape& mesh_shape) const;
  // The smallest memory_GB of any host (GB per device).
  double min_memory_GB() const;
  // "8x h100-nvlink + 8x a100-nvlink" (consecutive identical hosts merged: "2 hosts of 8x ...").
  std::string str() const;

  // Parses the JSON above; `base_dir` resolves relative profile paths ("" = as written).
  static Cluster from_json(const std::string& text, const std::string& base_dir = "");
  // from_json of a file (at most 1 MiB); errors name the file.
  static Cluster load(const std::string& path);
  // `hosts` hosts of `profile`, profile.ranks_per_host ranks each.
  static Cluster uniform(const HardwareProfile& profile, int64_t hosts);
};

}  // namespace dtensor
