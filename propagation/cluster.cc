#include "propagation/cluster.h"

#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "dtensor/core/file_io.h"
#include "dtensor/core/json.h"
#include "nlohmann/json.hpp"

namespace dtensor {
namespace {

constexpr int64_t kMaxClusterFileBytes = int64_t{1} << 20;

// An integer in [1, kMaxClusterRanks]: wrong types, fractions, negative and overflowing values are
// rejected before any arithmetic sees them.
int64_t count_field(const nlohmann::json& j, const std::string& where) {
  DT_CHECK(j.is_number_integer(), "cluster ", where, ": expected an integer in [1, ", kMaxClusterRanks, "], got ",
           j.dump());
  const bool in_range = j.is_number_unsigned() ? j.get<uint64_t>() <= static_cast<uint64_t>(kMaxClusterRanks)
                                               : j.get<int64_t>() <= kMaxClusterRanks;
  const bool positive = j.is_number_unsigned() ? j.get<uint64_t>() >= 1 : j.get<int64_t>() >= 1;
  DT_CHECK(in_range && positive, "cluster ", where, ": ", j.dump(), " is out of range; accepted: an integer in [1, ",
           kMaxClusterRanks, "]");
  return j.get<int64_t>();
}

// Time of the probe collectives on `link` for a group of n: (bandwidth-bound, latency-bound).
std::pair<double, double> probe(const LinkModel& link, int64_t n) {
  return {link.time_us(CommKind::kAllReduce, kLinkProbeBytes, n), link.time_us(CommKind::kAllReduce, 8, n)};
}

}  // namespace

int64_t Cluster::num_ranks() const {
  int64_t n = 0;
  for (const ClusterHost& h : hosts) n += h.ranks;
  return n;
}

int64_t Cluster::host_of(int64_t rank) const {
  DT_CHECK(rank >= 0, "cluster: rank ", rank, " is negative");
  for (size_t i = 0; i < hosts.size(); ++i) {
    if (rank < hosts[i].ranks) return static_cast<int64_t>(i);
    rank -= hosts[i].ranks;
  }
  DT_FAIL("cluster: rank beyond the cluster's ", num_ranks(), " ranks");
}

bool Cluster::homogeneous() const {
  for (const ClusterHost& h : hosts)
    if (h.profile != hosts.front().profile) return false;
  return true;
}

void Cluster::check_mesh(const Shape& mesh_shape, const std::string& mesh_str) const {
  DT_CHECK(numel(mesh_shape) == num_ranks(), "cluster ", str(), " has ", num_ranks(), " ranks but the mesh ",
           mesh_str, " has ", numel(mesh_shape), "; the hosts' ranks must add up to the mesh size");
}

std::vector<LinkModel> Cluster::links_for_mesh(const Shape& mesh_shape) const {
  check_mesh(mesh_shape, shape_str(mesh_shape));
  const int nd = static_cast<int>(mesh_shape.size());
  const int64_t n = numel(mesh_shape);
  std::vector<int64_t> host(n);
  for (int64_t r = 0, h = 0, left = hosts.empty() ? 0 : hosts[0].ranks; r < n; ++r) {
    while (left == 0) left = hosts[++h].ranks;
    host[r] = h;
    --left;
  }
  std::vector<LinkModel> links(nd);
  int64_t stride = 1;
  for (int i = nd - 1; i >= 0; --i) {
    const int64_t k = mesh_shape[i];
    const LinkModel* worst = nullptr;
    std::pair<double, double> worst_t{-1, -1};
    // Group leaders: ranks whose coordinate i is 0.
    for (int64_t r = 0; r < n; ++r) {
      if ((r / stride) % k != 0) continue;
      bool one_host = true;
      for (int64_t c = 1; c < k; ++c) one_host &= host[r + c * stride] == host[r];
      const LinkModel* link = &hosts[host[r]].profile->intra_host;
      std::pair<double, double> t = probe(*link, k);
      if (!one_host) {
        t = {-1, -1};
        for (int64_t c = 0; c < k; ++c) {
          const LinkModel* l = &hosts[host[r + c * stride]].profile->inter_host;
          if (auto lt = probe(*l, k); lt > t) std::tie(link, t) = std::make_pair(l, lt);
        }
      }
      if (t > worst_t) std::tie(worst, worst_t) = std::make_pair(link, t);
    }
    links[i] = *worst;
    stride *= k;
  }
  return links;
}

double Cluster::min_memory_GB() const {
  double m = hosts.empty() ? 0 : hosts[0].profile->memory_GB;
  for (const ClusterHost& h : hosts) m = std::min(m, h.profile->memory_GB);
  return m;
}

std::string Cluster::str() const {
  std::vector<std::string> parts;
  for (size_t i = 0; i < hosts.size();) {
    size_t j = i;
    while (j < hosts.size() && hosts[j].profile == hosts[i].profile && hosts[j].ranks == hosts[i].ranks) ++j;
    const std::string one = absl::StrCat(hosts[i].ranks, "x ", hosts[i].profile->name);
    parts.push_back(j - i == 1 ? one : absl::StrCat(j - i, " hosts of ", one));
    i = j;
  }
  return absl::StrJoin(parts, " + ");
}

Cluster Cluster::from_json(const std::string& text, const std::string& base_dir) {
  const nlohmann::json j = parse_json(text, "cluster");
  DT_CHECK(j.is_object() && j.contains("hosts"),
           "cluster: expected an object with a list \"hosts\", e.g. {\"hosts\": [{\"profile\": \"h100-nvlink\", "
           "\"ranks\": 8}]}");
  for (const auto& [key, value] : j.items())
    DT_CHECK(key == "hosts", "cluster: unknown field '", key, "'; accepted: hosts");
  const nlohmann::json& hs = j.at("hosts");
  DT_CHECK(hs.is_array() && !hs.empty(), "cluster hosts: expected a non-empty list of hosts");
  Cluster c;
  int64_t total = 0;
  for (size_t i = 0; i < hs.size(); ++i) {
    const std::string at = absl::StrCat("hosts[", i, "]");
    const nlohmann::json& h = hs[i];
    DT_CHECK(h.is_object(), "cluster ", at, ": expected an object {\"profile\", \"ranks\", \"count\"?}");
    for (const auto& [key, value] : h.items())
      DT_CHECK(key == "profile" || key == "ranks" || key == "count", "cluster ", at, ": unknown field '", key,
               "'; accepted: profile, ranks, count");
    DT_CHECK(h.contains("profile") && h.at("profile").is_string(), "cluster ", at,
             ".profile: expected a string, a profile name (",
             absl::StrJoin(hardware_profile_names(), ", "), ") or a profile JSON file");
    DT_CHECK(h.contains("ranks"), "cluster ", at, ": missing field 'ranks' (ranks on the host)");
    const int64_t ranks = count_field(h.at("ranks"), at + ".ranks");
    const int64_t count = h.contains("count") ? count_field(h.at("count"), at + ".count") : 1;
    // Both <= 2^16, so the product fits; the sum is checked before it grows further.
    DT_CHECK(ranks * count <= kMaxClusterRanks - total, "cluster ", at, ": the hosts hold more than ",
             kMaxClusterRanks, " ranks in all");
    total += ranks * count;
    std::string name = h.at("profile").get<std::string>();
    bool file = name.find('/') != std::string::npos || (name.size() > 5 && name.substr(name.size() - 5) == ".json");
    if (file && !base_dir.empty() && name[0] != '/') name = base_dir + "/" + name;
    const HardwareProfile* p = nullptr;
    try {
      p = &hardware_profile(name);
    } catch (const Error& e) {
      DT_FAIL("cluster ", at, ".profile: ", e.what());
    }
    for (int64_t k = 0; k < count; ++k) c.hosts.push_back({name, p, ranks});
  }
  return c;
}

Cluster Cluster::load(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash);
  try {
    return from_json(read_file(path, kMaxClusterFileBytes), dir);
  } catch (const Error& e) {
    DT_FAIL("cluster file ", path, ": ", e.what());
  }
}

Cluster Cluster::uniform(const HardwareProfile& profile, int64_t hosts) {
  DT_CHECK(hosts >= 1 && hosts * profile.ranks_per_host <= kMaxClusterRanks, "cluster: ", hosts,
           " hosts is not accepted; give 1 to ", kMaxClusterRanks / profile.ranks_per_host, " hosts");
  Cluster c;
  for (int64_t k = 0; k < hosts; ++k) c.hosts.push_back({profile.name, &profile, profile.ranks_per_host});
  return c;
}

}  // namespace dtensor
