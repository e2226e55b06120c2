// Reference-counted, 64-byte aligned memory. A Storage either owns its buffer or borrows one from
// another framework (DLPack), in which case its deleter returns the buffer to that framework.
//
// Non-CPU storage comes from an allocator registered per DeviceType (the CUDA libraries register
// theirs for kCUDA when linked, see dtensor/core/cuda/cuda_storage.h); the core itself knows no
// device API.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "dtensor/core/device.h"

namespace dtensor {

class Storage;

// Allocates `nbytes` (uninitialized) on `device` and returns the storage that owns them (usually
// through Storage::borrow with a deleter that gives the memory back). Throws dtensor::Error on
// failure (out of memory, bad device index), naming the device and the size.
using DeviceAllocator = std::function<std::shared_ptr<Storage>(size_t nbytes, Device device)>;

class Storage {
 public:
  static constexpr size_t kAlignment = 64;

  // Allocates nbytes, uninitialized: CPU memory (rounded up to the alignment) for the CPU, else
  // through the allocator registered for device.type. Throws dtensor::Error if the allocation fails
  // or no allocator is registered for the device type (naming it and the library to link).
  // CPU blocks of kCacheMinBytes and more come from a process-wide cache of freed blocks (size
  // classes a quarter power of two apart, at most kCacheCapacity bytes held), so repeated
  // collectives and kernels reuse warm pages instead of paying page faults on every fresh mmap.
  // Throws Error above kMaxAllocationBytes (dtensor/core/limits.h) or when memory runs out.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device = cpu());
  static constexpr size_t kCacheMinBytes = size_t{64} << 10;
  static constexpr size_t kCacheCapacity = size_t{1} << 30;
  struct CacheStats {
    size_t cached_bytes = 0;  // held in free lists
    int64_t hits = 0, misses = 0;
  };
  static CacheStats cache_stats();
  static void empty_cache();  // frees every cached CPU block
  // Installs (or, with an empty function, removes) the allocator of a non-CPU device type; returns
  // the previous one. Thread-safe. Throws dtensor::Error for DeviceType::kCPU.
  static DeviceAllocator register_allocator(DeviceType type, DeviceAllocator allocator);
  static bool has_allocator(DeviceType type);
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
