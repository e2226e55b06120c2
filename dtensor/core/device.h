// Where a tensor's storage lives. CUDA storage arrives with the CUDA path; the field exists now so
// that every layer already carries the device.
#pragma once

#include <string>

namespace dtensor {

enum class DeviceType : uint8_t { kCPU, kCUDA };

struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  std::string str() const {
    return type == DeviceType::kCPU ? std::string("cpu") : "cuda:" + std::to_string(index);
  }
};

inline Device cpu() { return Device{}; }

}  // namespace dtensor
