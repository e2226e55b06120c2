#include "dtensor/core/storage.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "dtensor/core/error.h"
#include "dtensor/core/limits.h"

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

// The free lists of the CPU block cache, by size class.
struct BlockCache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free;
  size_t cached = 0;
  int64_t hits = 0, misses = 0;
};
BlockCache& block_cache() {
  static BlockCache* c = new BlockCache();  // never destroyed: blocks may be freed at exit
  return *c;
}

// The size class of a request: the next of 2^k, 1.25 * 2^k, 1.5 * 2^k, 1.75 * 2^k, 2^(k+1).
// n <= kMaxAllocationBytes, so the doubling below cannot overflow.
size_t size_class(size_t n) {
  size_t p = 1;
  while (p <= n / 2) p *= 2;
  for (size_t q = 0; q <= 4; ++q) {
    size_t c = p + p / 4 * q;
    if (c >= n) return (c + Storage::kAlignment - 1) / Storage::kAlignment * Storage::kAlignment;
  }
  return 2 * p;
}

void release_block(void* p, size_t cls) {
  BlockCache& c = block_cache();
  {
    std::lock_guard<std::mutex> l(c.mu);
    if (c.cached + cls <= Storage::kCacheCapacity) {
      c.free[cls].push_back(p);
      c.cached += cls;
      return;
    }
  }
  std::free(p);
}

}  // namespace

Storage::CacheStats Storage::cache_stats() {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> l(c.mu);
  return {c.cached, c.hits, c.misses};
}

void Storage::empty_cache() {
  BlockCache& c = block_cache();
  std::lock_guard<std::mutex> l(c.mu);
  for (auto& [cls, blocks] : c.free)
    for (void* p : blocks) std::free(p);
  c.free.clear();
  c.cached = 0;
}

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
  DT_CHECK(nbytes <= kMaxAllocationBytes, "Storage::allocate: ", nbytes, " bytes on ", device.str(),
           " is above the largest allocation accepted (", kMaxAllocationBytes, " bytes)");
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
  if (rounded < kCacheMinBytes) {
    void* p = std::aligned_alloc(kAlignment, rounded);
    DT_CHECK(p != nullptr, "Storage::allocate: out of memory allocating ", nbytes, " bytes");
    return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [p] { std::free(p); }));
  }
  const size_t cls = size_class(rounded);
  void* p = nullptr;
  {
    BlockCache& c = block_cache();
    std::lock_guard<std::mutex> l(c.mu);
    auto it = c.free.find(cls);
    if (it != c.free.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      c.cached -= cls;
      ++c.hits;
    } else {
      ++c.misses;
    }
  }
  if (!p) p = std::aligned_alloc(kAlignment, cls);
  DT_CHECK(p != nullptr, "Storage::allocate: out of memory allocating ", nbytes, " bytes");
  return std::shared_ptr<Storage>(new Storage(p, nbytes, device, [p, cls] { release_block(p, cls); }));
}

std::shared_ptr<Storage> Storage::borrow(void* data, size_t nbytes, Device device,
                                         std::function<void()> deleter) {
  return std::shared_ptr<Storage>(new Storage(data, nbytes, device, std::move(deleter)));
}

Storage::~Storage() {
  if (deleter_) deleter_();
}

}  // namespace dtensor
