// Reference-counted, 64-byte aligned memory. A Storage either owns its buffer or borrows one from
// another framework (DLPack), in which case its deleter returns the buffer to that framework.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "dtensor/core/device.h"

namespace dtensor {

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // Allocates nbytes (rounded up to the alignment) of CPU memory, uninitialized.
  // Throws dtensor::Error if the allocation fails or device is not the CPU.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = cpu());
  // Wraps memory owned elsewhere; `deleter` runs when the last reference goes.
  static std::shared_ptr<Storage> borrow(void* data, size_t nbytes, Device device,
                                         std::function<void()> deleter);

  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

 private:
  Storage(void* data, size_t nbytes, Device device, std::function<void()> deleter)
      : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::function<void()> deleter_;
};

}  // namespace dtensor
