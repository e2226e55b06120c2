#include "propagation/hardware.h"

#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "nlohmann/json.hpp"

namespace dtensor {

// Generated from hardware/*.json by the hardware_data genrule.
extern const char* const kHardwareProfilesJson[];
extern const int kHardwareProfilesCount;

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

HardwareProfile HardwareProfile::from_json(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    DT_FAIL("hardware profile: invalid JSON: ", e.what());
  }
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
      const auto& l = need(links, key, p.name + ".links");
      link->latency_us = need(l, "latency_us", p.name).get<double>();
      link->bandwidth_GBps = need(l, "bandwidth_GBps", p.name).get<double>();
      DT_CHECK(link->bandwidth_GBps > 0 && link->latency_us >= 0, "hardware profile ", p.name,
               ": link ", key, " needs bandwidth > 0 and latency >= 0");
    }
    const auto& c = need(j, "compute", p.name);
    for (auto& [k, v] : need(c, "peak_tflops", p.name + ".compute").items()) p.peak_tflops[k] = v.get<double>();
    p.memory_bandwidth_GBps = need(c, "memory_bandwidth_GBps", p.name).get<double>();
    p.memory_GB = need(c, "memory_GB", p.name).get<double>();
  } catch (const nlohmann::json::exception& e) {
    DT_FAIL("hardware profile ", p.name, ": ", e.what());
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
}  // namespace

const HardwareProfile& hardware_profile(const std::string& name) {
  for (const auto& p : profiles())
    if (p.name == name) return p;
  DT_FAIL("unknown hardware '", name, "'; known: ", absl::StrJoin(hardware_profile_names(), ", "));
}

std::vector<std::string> hardware_profile_names() {
  std::vector<std::string> names;
  for (const auto& p : profiles()) names.push_back(p.name);
  return names;
}

}  // namespace dtensor
