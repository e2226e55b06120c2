#include "kernels/device_dispatch.h"

#include <map>
#include <mutex>

namespace dtensor::kernels {
namespace {

struct Fallbacks {
  std::mutex mu;
  std::map<std::string, int64_t> by_name;
};

Fallbacks& fallbacks() {
  static Fallbacks* f = new Fallbacks;  // never destroyed: kernels may run during exit
  return *f;
}

}  // namespace

DeviceKernels& cuda_kernels() {
  static DeviceKernels* k = new DeviceKernels;
  return *k;
}

std::vector<std::pair<std::string, int64_t>> host_fallback_counts() {
  Fallbacks& f = fallbacks();
  std::lock_guard<std::mutex> l(f.mu);
  return {f.by_name.begin(), f.by_name.end()};
}

void reset_host_fallback_counts() {
  Fallbacks& f = fallbacks();
  std::lock_guard<std::mutex> l(f.mu);
  f.by_name.clear();
}

void note_host_fallback(const std::string& name) {
  Fallbacks& f = fallbacks();
  std::lock_guard<std::mutex> l(f.mu);
  ++f.by_name[name];
}

}  // namespace dtensor::kernels
