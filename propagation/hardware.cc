#include "propagation/hardware.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <memory>
#include <mutex>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "dtensor/core/file_io.h"
#include "dtensor/core/json.h"
#include "nlohmann/json.hpp"

namespace dtensor {

// Generated from hardware/*.json by the hardware_data genrule.
extern const char* const kHardwareProfilesJson[];
extern const int kHardwareProfilesCount;

int64_t ring_steps(CommKind kind, int64_t n) {
  if (n <= 1) return 0;
  switch (kind) {
    case CommKind::kAllReduce: return 2 * (n - 1);
    case CommKind::kAllGather:
    case CommKind::kReduceScatter:
    case CommKind::kAllToAll:
    case CommKind::kBroadcast: return n - 1;
    case CommKind::kSendRecv: return 1;
    case CommKind::kLocal:
    case CommKind::kBarrier: return 0;
  }
  return 0;
}

CollectiveModel LinkModel::model(CommKind kind) const {
  const auto& own = collectives[static_cast<int>(kind)];
  return own ? *own : CollectiveModel{base_latency_us, latency_us, bandwidth_GBps};
}

double CollectiveModel::time_us(CommKind kind, int64_t bytes, int64_t n) const {
  if (auto it = by_group_size.find(n); it != by_group_size.end() && !it->second.empty()) {
    const std::vector<CollectiveSegment>& ranges = it->second;
    auto next = std::upper_bound(ranges.begin(), ranges.end(), bytes,
                                 [](int64_t b, const CollectiveSegment& r) { return b < r.from_bytes; });
    const CollectiveSegment& r = next == ranges.begin() ? ranges.front() : *std::prev(next);
    return r.latency_us + static_cast<double>(bytes) * r.us_per_byte;
  }
  return base_latency_us + latency_us * static_cast<double>(ring_steps(kind, n)) +
         static_cast<double>(bytes) / bytes_per_us();
}

double LinkModel::time_us(CommKind kind, int64_t bytes, int64_t n) const {
  const auto& own = collectives[static_cast<int>(kind)];
  if (own) return own->time_us(kind, bytes, n);
  return base_latency_us + latency_us * static_cast<double>(ring_steps(kind, n)) +
         static_cast<double>(bytes) / bytes_per_us();
}

std::vector<LinkModel> HardwareProfile::links_for_mesh(const Shape& mesh_shape) const {
  std::vector<LinkModel> links(mesh_shape.size(), inter_host);
  int64_t span = 1;
  for (int i = static_cast<int>(mesh_shape.size()) - 1; i >= 0; --i) {
    span *= mesh_shape[i];
    if (span <= ranks_per_host) links[i] = intra_host;
  }
  return links;
}

double HardwareProfile::peak_flops_per_us(DType dtype) const {
  auto it = peak_tflops.find(dtype_name(dtype));
  if (it == peak_tflops.end()) it = peak_tflops.find("float32");
  return (it == peak_tflops.end() ? 1.0 : it->second) * 1e6;
}

namespace {

constexpr CommKind kModelledKinds[] = {CommKind::kAllReduce, CommKind::kAllGather, CommKind::kReduceScatter,
                                       CommKind::kAllToAll,  CommKind::kBroadcast, CommKind::kSendRecv};

void check_model(const CollectiveModel& m, const std::string& where) {
  DT_CHECK(m.bandwidth_GBps > 0 && m.latency_us >= 0 && m.base_latency_us >= 0 &&
               std::isfinite(m.bandwidth_GBps) && std::isfinite(m.latency_us) && std::isfinite(m.base_latency_us),
           "hardware profile ", where, " needs finite bandwidth_GBps > 0, latency_us >= 0 and base_latency_us >= 0");
}

// "by_group_size": {"N": [{"from_bytes", "latency_us", "bandwidth_GBps"?}, ...], ...} (hardware.h).
std::map<int64_t, std::vector<CollectiveSegment>> parse_by_group_size(const nlohmann::json& j, const std::string& where) {
  DT_CHECK(j.is_object(), "hardware profile ", where, ": expected an object by group size");
  std::map<int64_t, std::vector<CollectiveSegment>> out;
  for (const auto& [key, ranges] : j.items()) {
    int64_t n = 0;
    DT_CHECK(absl::SimpleAtoi(key, &n) && n >= 2, "hardware profile ", where, ": '", key,
             "' is not a group size (an integer >= 2)");
    const std::string at = where + "." + key;
    DT_CHECK(ranges.is_array() && !ranges.empty(), "hardware profile ", at, ": expected a non-empty list of ranges");
    std::vector<CollectiveSegment>& v = out[n];
    for (const auto& r : ranges) {
      DT_CHECK(r.is_object() && r.contains("from_bytes") && r.contains("latency_us"), "hardware profile ", at,
               ": a range needs from_bytes and latency_us (and bandwidth_GBps unless flat)");
      CollectiveSegment s{r.at("from_bytes").get<int64_t>(), r.at("latency_us").get<double>(), 0.0};
      if (r.contains("bandwidth_GBps")) {
        const double bw = r.at("bandwidth_GBps").get<double>();
        DT_CHECK(std::isfinite(bw) && bw > 0, "hardware profile ", at, ": bandwidth_GBps ", bw,
                 " must be finite and > 0 (leave it out for a range whose time does not grow with the bytes)");
        s.us_per_byte = 1.0 / (bw * 1e3);
      }
      DT_CHECK(std::isfinite(s.latency_us) && s.latency_us >= 0, "hardware profile ", at, ": latency_us ",
               s.latency_us, " must be finite and >= 0");
      DT_CHECK(v.empty() ? s.from_bytes == 0 : s.from_bytes > v.back().from_bytes, "hardware profile ", at,
               ": from_bytes must start at 0 and increase strictly (got ", s.from_bytes, ")");
      v.push_back(s);
    }
  }
  return out;
}

}  // namespace

HardwareProfile HardwareProfile::from_json(const std::string& text) {
  const nlohmann::json j = parse_json(text, "hardware profile");
  auto need = [&](const nlohmann::json& obj, const char* key, const std::string& where) -> const nlohmann::json& {
    DT_CHECK(obj.is_object() && obj.contains(key), "hardware profile ", where, ": missing field '",
             key, "'");
    return obj.at(key);
  };
  HardwareProfile p;
  try {
    p.name = need(j, "name", "").get<std::string>();
    p.description = j.value("description", "");
    p.sources = j.value("sources", "");
    p.ranks_per_host = need(j, "ranks_per_host", p.name).get<int>();
    const auto& links = need(j, "links", p.name);
    for (auto [key, link] : {std::pair{"intra_host", &p.intra_host}, {"inter_host", &p.inter_host}}) {
      const std::string where = p.name + ".links." + key;
      const auto& l = need(links, key, p.name + ".links");
      link->latency_us = need(l, "latency_us", where).get<double>();
      link->bandwidth_GBps = need(l, "bandwidth_GBps", where).get<double>();
      link->base_latency_us = l.value("base_latency_us", 0.0);
      check_model(link->model(CommKind::kAllReduce), where);
      if (!l.contains("collectives")) continue;
      const auto& cs = l.at("collectives");
      DT_CHECK(cs.is_object(), "hardware profile ", where, ".collectives: expected an object by kind name");
      for (const auto& [kind_name, c] : cs.items()) {
        CommKind kind;
        try {
          kind = comm_kind_from_name(kind_name);
        } catch (const Error& e) {
          DT_FAIL("hardware profile ", where, ".collectives: ", e.what());
        }
        DT_CHECK(std::find(std::begin(kModelledKinds), std::end(kModelledKinds), kind) != std::end(kModelledKinds),
                 "hardware profile ", where, ".collectives: '", kind_name,
                 "' has no cost; accepted: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, send_recv");
        DT_CHECK(c.is_object(), "hardware profile ", where, ".collectives.", kind_name, ": expected an object");
        CollectiveModel m{c.value("base_latency_us", link->base_latency_us), c.value("latency_us", link->latency_us),
                          c.value("bandwidth_GBps", link->bandwidth_GBps)};
        check_model(m, where + ".collectives." + kind_name);
        if (c.contains("by_group_size"))
          m.by_group_size =
              parse_by_group_size(c.at("by_group_size"), where + ".collectives." + kind_name + ".by_group_size");
        link->collectives[static_cast<int>(kind)] = m;
      }
    }
    const auto& c = need(j, "compute", p.name);
    // Rates and sizes divide times and fit memory: each must be finite and > 0 (a 0 made every plan
    // take no time and "fit in 0 GB").
    auto positive = [&](const nlohmann::json& v, const std::string& field) {
      const double x = v.get<double>();
      DT_CHECK(std::isfinite(x) && x > 0, "hardware profile ", p.name, ": compute.", field, " is ", x,
               "; accepted: a finite number > 0");
      return x;
    };
    for (auto& [k, v] : need(c, "peak_tflops", p.name + ".compute").items())
      p.peak_tflops[k] = positive(v, "peak_tflops." + k);
    p.memory_bandwidth_GBps = positive(need(c, "memory_bandwidth_GBps", p.name), "memory_bandwidth_GBps");
    p.memory_GB = positive(need(c, "memory_GB", p.name), "memory_GB");
  } catch (const nlohmann::json::exception& e) {
    DT_FAIL("hardware profile ", p.name, ": ", json_error_message(e));
  }
  DT_CHECK(p.ranks_per_host >= 1, "hardware profile ", p.name, ": ranks_per_host must be >= 1");
  return p;
}

namespace {
const std::vector<HardwareProfile>& profiles() {
  static const auto* all = [] {
    auto* v = new std::vector<HardwareProfile>();
    for (int i = 0; i < kHardwareProfilesCount; ++i)
      v->push_back(HardwareProfile::from_json(kHardwareProfilesJson[i]));
    return v;
  }();
  return *all;
}

// Profiles loaded from files, by path; never freed (callers keep references).
std::mutex g_files_mu;
std::map<std::string, std::unique_ptr<const HardwareProfile>>& file_profiles() {
  static auto* m = new std::map<std::string, std::unique_ptr<const HardwareProfile>>();
  return *m;
}

std::atomic<const HardwareProfile*> g_default{nullptr};

// Profile files are small; a larger file is not one.
constexpr int64_t kMaxProfileBytes = int64_t{16} << 20;
}  // namespace

const HardwareProfile& hardware_profile(const std::string& name) {
  for (const auto& p : profiles())
    if (p.name == name) return p;
  if (absl::StrContains(name, '/') || absl::EndsWith(name, ".json")) {
    std::lock_guard<std::mutex> lock(g_files_mu);
    auto& slot = file_profiles()[name];
    if (!slot) {
      try {
        slot = std::make_unique<const HardwareProfile>(
            HardwareProfile::from_json(read_file(name, kMaxProfileBytes)));
      } catch (const Error& e) {
        file_profiles().erase(name);
        DT_FAIL("hardware file ", name, ": ", e.what());
      }
    }
    return *slot;
  }
  DT_FAIL("unknown hardware '", name, "'; known: ", absl::StrJoin(hardware_profile_names(), ", "),
          ", or a profile JSON file (a path holding '/' or ending in .json; dtensor calibrate --out writes one)");
}

std::vector<std::string> hardware_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : profiles()) names.push_back(p.name);
  return names;
}

const HardwareProfile& default_hardware() {
  const HardwareProfile* p = g_default.load(std::memory_order_acquire);
  return p ? *p : hardware_profile(kDefaultHardware);
}

void set_default_hardware(const HardwareProfile& profile) { g_default.store(&profile, std::memory_order_release); }

}  // namespace dtensor
