#include "dtensor/core/storage.h"

#include <cstdlib>
#include <mutex>

#include "dtensor/core/error.h"

namespace dtensor {
namespace {

// Allocators of the non-CPU device types, indexed by DeviceType.
struct AllocatorTable {
  std::mutex mu;
  DeviceAllocator by_type[static_cast<int>(DeviceType::kCUDA) + 1];
};

AllocatorTable& allocators() {
  static AllocatorTable* table = new AllocatorTable;  // never destroyed: storages may outlive main
  return *table;
}

}  // namespace

DeviceAllocator Storage::register_allocator(DeviceType type, DeviceAllocator allocator) {
  DT_CHECK(type != DeviceType::kCPU,
           "Storage::register_allocator: cpu storage is built in; accepted: non-cpu device types");
  AllocatorTable& t = allocators();
  std::lock_guard<std::mutex> lock(t.mu);
  std::swap(t.by_type[static_cast<int>(type)], allocator);
  return allocator;
}

bool Storage::has_allocator(DeviceType type) {
  if (type == DeviceType::kCPU) return true;
  AllocatorTable& t = allocators();
  std::lock_guard<std::mutex> lock(t.mu);
  return static_cast<bool>(t.by_type[static_cast<int>(type)]);
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (!device.is_cpu()) {
    DeviceAllocator alloc;
    {
      AllocatorTable& t = allocators();
      std::lock_guard<std::mutex> lock(t.mu);
      alloc = t.by_type[static_cast<int>(device.type)];
    }
    DT_CHECK(alloc, "Storage::allocate: no allocator is registered for ", device.str(), " (",
             nbytes, " bytes); link //dtensor/core/cuda:cuda_storage for CUDA storage");
    return alloc(nbytes, device);
  }
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded == 0) rounded = kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded);
  DT_CHECK(p != nullptr, "Storage::allocate: out of memory allocating ", nbytes, " bytes");
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [p] { std::free(p); }));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device device,
                                         std::function<void()> deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(deleter)));
}

Storage::~Storage() {
  if (deleter_) deleter_();
}

}  // namespace dtensor
