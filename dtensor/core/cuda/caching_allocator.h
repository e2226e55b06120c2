// A caching device-memory allocator (host logic only: no CUDA header here, so that it is tested on
// machines without a GPU through a fake MemoryBackend; cuda_storage.cc plugs in cudaMalloc).
//
// Size classes: a request of n bytes is served by a block of round_size(n) bytes:
//   n <= 1 MiB   rounded up to a multiple of 512 bytes (0 counts as 512);
//   n >  1 MiB   rounded up to a multiple of 2 MiB.
// Blocks are never split or merged. A freed block goes back to the free list of the stream it was
// allocated on (its "home" stream), keyed by size. A request takes the smallest free block of its
// stream and device whose size is at least the rounded size and at most max_reuse_size(rounded)
// (2x for small classes, +25% for large ones), else asks the backend for a new block.
//
// Stream-ordered reuse (the scheme of PyTorch's CUDA caching allocator): work on one stream runs
// in order, so a block freed by the host while kernels on its home stream still use it can be
// handed at once to a later allocation on that same stream: the new user's kernels are queued
// after the old ones. A block that was also used on other streams (record_stream) is not reusable
// until events recorded on those streams at free time have completed; such blocks wait in a pending
// list that every allocate() polls.
//
// Out of memory: when the backend returns no memory, the allocator waits for the pending blocks,
// returns every cached free block of that device to the backend and tries once more; if that
// fails too it throws a dtensor::Error naming the device, the request and the stats.
// Thread-safe (one mutex). Sizes are in bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dtensor::cuda {

using StreamId = void*;  // a cudaStream_t; nullptr is the legacy default stream
using EventId = void*;   // a cudaEvent_t

// What the allocator needs from a device runtime.
class MemoryBackend {
 public:
  virtual ~MemoryBackend() = default;
  // nbytes of memory on `device`; nullptr when the device is out of memory. Other failures throw
  // dtensor::Error.
  virtual void* malloc(int device, size_t nbytes) = 0;
  virtual void free(int device, void* ptr) = 0;
  // An event recorded on `stream` of `device` now: it completes when the work queued before it has.
  virtual EventId record_event(int device, StreamId stream) = 0;
  virtual bool query_event(EventId event) = 0;  // true once completed
  virtual void synchronize_event(EventId event) = 0;
  virtual void destroy_event(EventId event) = 0;
};

// Per device. "Block" bytes are rounded sizes.
struct AllocatorStats {
  int64_t allocated_bytes = 0;       // blocks held by users now
  int64_t peak_allocated_bytes = 0;  // since the last reset_peak_stats
  int64_t requested_bytes = 0;       // the unrounded sizes users asked for, of the blocks held now
  int64_t reserved_bytes = 0;        // obtained from the backend: held + cached + pending
  int64_t peak_reserved_bytes = 0;
  int64_t cached_bytes = 0;   // free blocks ready for reuse
  int64_t pending_bytes = 0;  // freed blocks waiting for events on other streams
  int64_t allocations = 0;    // successful allocate() calls
  int64_t frees = 0;
  int64_t cache_hits = 0;       // allocations served from a cached block
  int64_t backend_mallocs = 0;  // successful backend malloc calls
  int64_t backend_frees = 0;
  int64_t cache_flushes = 0;  // out-of-memory retries that emptied the cache
  int64_t ooms = 0;           // allocations that failed even after a flush
  std::string str() const;    // "allocated 1.5 MiB (peak 2 MiB), reserved ..."
};

class CachingAllocator {
 public:
  static constexpr size_t kMinBlock = 512;
  static constexpr size_t kSmallLimit = size_t{1} << 20;    // 1 MiB
  static constexpr size_t kLargeGranule = size_t{2} << 20;  // 2 MiB

  // The size class (block size) of a request of nbytes.
  static size_t round_size(size_t nbytes);
  // The largest cached block a request of rounded size `rounded` may take.
  static size_t max_reuse_size(size_t rounded);

  explicit CachingAllocator(std::unique_ptr<MemoryBackend> backend);
  // Returns the cached blocks to the backend; blocks still held by users are left alone.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least nbytes on `device`, for use on `stream`. Throws dtensor::Error when the
  // device has no memory left even after emptying the cache.
  void* allocate(int device, size_t nbytes, StreamId stream);
  // Gives back a pointer returned by allocate (nullptr: no-op). Throws dtensor::Error for a pointer
  // this allocator did not hand out.
  void free(void* ptr);
  // Declares that the block holding ptr is also used by work on `stream` (ignored for its home
  // stream): when freed it is not reused before that work completes.
  void record_stream(void* ptr, StreamId stream);
  // Waits for the pending blocks and returns every cached block to the backend.
  void empty_cache();

  AllocatorStats stats(int device) const;
  void reset_peak_stats(int device);
  // Size of the block holding ptr (its size class); 0 for an unknown pointer.
  size_t block_size(void* ptr) const;

 private:
  struct Block {
    int device;
    StreamId stream;  // home stream
    size_t size;      // rounded
    size_t requested;
    void* ptr;
    std::vector<StreamId> other_streams;  // record_stream
  };
  struct Pending {
    Block* block;
    std::vector<EventId> events;
  };
  using FreeList = std::multimap<size_t, Block*>;  // by size

  void process_pending_locked(bool wait);
  void release_cached_locked(int device);
  AllocatorStats& stats_locked(int device);

  std::unique_ptr<MemoryBackend> backend_;
  mutable std::mutex mu_;
  std::unordered_map<void*, std::unique_ptr<Block>> blocks_;  // every block obtained, by pointer
  std::map<std::pair<int, StreamId>, FreeList> free_;         // (device, home stream) -> cached
  std::vector<Pending> pending_;
  std::map<int, AllocatorStats> stats_;
};

}  // namespace dtensor::cuda
