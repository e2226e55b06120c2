// Host-side pieces of the CUDA path, runnable without a GPU: the caching allocator's size classes,
// stream-ordered reuse and out-of-memory handling (with a fake device-memory backend), and the
// per-device-type allocator registry of dtensor/core/storage.h.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "dtensor/core/cuda/caching_allocator.h"
#include "dtensor/core/storage.h"
#include "dtensor/core/tensor.h"
#include "gtest/gtest.h"

namespace dtensor::cuda {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Hands out fake addresses from a budget; events complete when the test says so.
class FakeBackend : public MemoryBackend {
 public:
  struct State {
    size_t capacity = 64 * kMiB;
    size_t used = 0;
    uintptr_t next = 0x10000;
    std::map<void*, size_t> live;
    std::map<EventId, bool> events;  // event -> completed
    std::map<EventId, StreamId> event_stream;
    int mallocs = 0, frees = 0;
  };
  explicit FakeBackend(std::shared_ptr<State> s) : s_(std::move(s)) {}

  void* malloc(int, size_t n) override {
    if (s_->used + n > s_->capacity) return nullptr;
    void* p = reinterpret_cast<void*>(s_->next);
    s_->next += n + 4096;
    s_->used += n;
    s_->live[p] = n;
    ++s_->mallocs;
    return p;
  }
  void free(int, void* p) override {
    s_->used -= s_->live.at(p);
    s_->live.erase(p);
    ++s_->frees;
  }
  EventId record_event(int, StreamId stream) override {
    EventId e = reinterpret_cast<EventId>(s_->next++);
    s_->events[e] = false;
    s_->event_stream[e] = stream;
    return e;
  }
  bool query_event(EventId e) override { return s_->events.at(e); }
  void synchronize_event(EventId e) override { s_->events.at(e) = true; }
  void destroy_event(EventId e) override { s_->events.erase(e); }

 private:
  std::shared_ptr<State> s_;
};

StreamId stream(int i) { return reinterpret_cast<StreamId>(static_cast<uintptr_t>(0x100 * i)); }

struct Fixture : ::testing::Test {
  std::shared_ptr<FakeBackend::State> state = std::make_shared<FakeBackend::State>();
  CachingAllocator alloc{std::make_unique<FakeBackend>(state)};
};

TEST(CachingAllocatorSizes, SizeClasses) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(kMiB), kMiB);
  EXPECT_EQ(CachingAllocator::round_size(kMiB + 1), 2 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(3 * kMiB), 4 * kMiB);
  EXPECT_EQ(CachingAllocator::round_size(4 * kMiB), 4 * kMiB);
  EXPECT_EQ(CachingAllocator::max_reuse_size(1024), 2048u);
  EXPECT_EQ(CachingAllocator::max_reuse_size(8 * kMiB), 10 * kMiB);
}

using CachingAllocatorTest = Fixture;

TEST_F(CachingAllocatorTest, ReusesFreedBlocksOnTheSameStream) {
  void* p = alloc.allocate(0, 1000, stream(1));
  EXPECT_EQ(alloc.block_size(p), 1024u);
  alloc.free(p);
  void* q = alloc.allocate(0, 800, stream(1));  // same class: the cached block
  EXPECT_EQ(q, p);
  AllocatorStats st = alloc.stats(0);
  EXPECT_EQ(st.allocations, 2);
  EXPECT_EQ(st.cache_hits, 1);
  EXPECT_EQ(st.backend_mallocs, 1);
  EXPECT_EQ(st.allocated_bytes, 1024);
  EXPECT_EQ(st.requested_bytes, 800);
  EXPECT_EQ(st.reserved_bytes, 1024);
  // A smaller class may take a block up to twice its size, not more.
  alloc.free(q);
  EXPECT_EQ(alloc.allocate(0, 512, stream(1)), p);
  void* small = alloc.allocate(0, 100, stream(1));
  alloc.free(p);
  alloc.free(small);
  void* tiny = alloc.allocate(0, 200, stream(1));  // 512: takes the 512 block, not the 1024
  EXPECT_EQ(tiny, small);
  EXPECT_EQ(state->mallocs, 2);
}

TEST_F(CachingAllocatorTest, DoesNotReuseAcrossStreamsOrDevices) {
  void* p = alloc.allocate(0, 4096, stream(1));
  alloc.free(p);
  void* q = alloc.allocate(0, 4096, stream(2));
  EXPECT_NE(q, p);
  void* r = alloc.allocate(1, 4096, stream(1));
  EXPECT_NE(r, p);
  EXPECT_EQ(alloc.allocate(0, 4096, stream(1)), p);
  EXPECT_EQ(alloc.stats(1).backend_mallocs, 1);
  EXPECT_EQ(alloc.stats(0).backend_mallocs, 2);
}

TEST_F(CachingAllocatorTest, LargeBlocksAreReusedWithinAQuarter) {
  void* big = alloc.allocate(0, 8 * kMiB, stream(1));
  alloc.free(big);
  void* two = alloc.allocate(0, 2 * kMiB, stream(1));  // 8 MiB > 2.5 MiB: a new block
  EXPECT_NE(two, big);
  void* seven = alloc.allocate(0, 7 * kMiB, stream(1));  // class 8 MiB: the cached one
  EXPECT_EQ(seven, big);
}

TEST_F(CachingAllocatorTest, RecordStreamDelaysReuseUntilTheEventCompletes) {
  void* p = alloc.allocate(0, 4096, stream(1));
  alloc.record_stream(p, stream(2));
  alloc.record_stream(p, stream(1));  // its home stream: ignored
  alloc.free(p);
  ASSERT_EQ(state->events.size(), 1u);
  EXPECT_EQ(state->event_stream.begin()->second, stream(2));
  EXPECT_EQ(alloc.stats(0).pending_bytes, 4096);
  void* q = alloc.allocate(0, 4096, stream(1));  // stream 2 may still read p
  EXPECT_NE(q, p);
  state->events.begin()->second = true;
  void* r = alloc.allocate(0, 4096, stream(1));
  EXPECT_EQ(r, p);
  EXPECT_TRUE(state->events.empty());  // destroyed once used
  EXPECT_EQ(alloc.stats(0).pending_bytes, 0);
}

TEST_F(CachingAllocatorTest, OutOfMemoryFlushesTheCacheThenThrows) {
  state->capacity = 10 * kMiB;
  void* a = alloc.allocate(0, 8 * kMiB, stream(1));
  alloc.free(a);                                     // cached: 8 MiB reserved
  void* b = alloc.allocate(0, 6 * kMiB, stream(2));  // needs the cache back
  EXPECT_NE(b, nullptr);
  AllocatorStats st = alloc.stats(0);
  EXPECT_EQ(st.cache_flushes, 1);
  EXPECT_EQ(st.backend_frees, 1);
  EXPECT_EQ(st.reserved_bytes, static_cast<int64_t>(6 * kMiB));
  try {
    alloc.allocate(0, 8 * kMiB, stream(1));
    ADD_FAILURE() << "expected an out-of-memory error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("CUDA out of memory on cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("8.00 MiB"), std::string::npos) << msg;
  }
  EXPECT_EQ(alloc.stats(0).ooms, 1);
}

TEST_F(CachingAllocatorTest, EmptyCacheWaitsForPendingBlocksAndReturnsEverything) {
  void* a = alloc.allocate(0, 4096, stream(1));
  void* b = alloc.allocate(0, 3 * kMiB, stream(1));
  void* c = alloc.allocate(0, 4096, stream(1));
  alloc.record_stream(b, stream(3));
  alloc.free(a);
  alloc.free(b);
  alloc.empty_cache();  // c is still held
  AllocatorStats st = alloc.stats(0);
  EXPECT_EQ(st.reserved_bytes, 4096);
  EXPECT_EQ(st.cached_bytes, 0);
  EXPECT_EQ(st.pending_bytes, 0);
  EXPECT_EQ(state->live.size(), 1u);
  alloc.free(c);
}

TEST_F(CachingAllocatorTest, PeakStatsAndErrors) {
  void* a = alloc.allocate(0, 3 * kMiB, stream(1));
  alloc.free(a);
  AllocatorStats st = alloc.stats(0);
  EXPECT_EQ(st.peak_allocated_bytes, static_cast<int64_t>(4 * kMiB));
  EXPECT_EQ(st.allocated_bytes, 0);
  alloc.reset_peak_stats(0);
  EXPECT_EQ(alloc.stats(0).peak_allocated_bytes, 0);
  EXPECT_EQ(alloc.stats(0).peak_reserved_bytes, static_cast<int64_t>(4 * kMiB));
  int local = 0;
  EXPECT_THROW(alloc.free(&local), Error);
  EXPECT_THROW(alloc.record_stream(&local, stream(1)), Error);
  EXPECT_EQ(alloc.block_size(&local), 0u);
  alloc.free(nullptr);  // no-op
  EXPECT_NE(st.str().find("allocated 0 B (peak 4.00 MiB)"), std::string::npos) << st.str();
}

// ---- The device allocator registry of dtensor/core/storage.h.

TEST(StorageRegistry, AllocatesThroughTheRegisteredAllocator) {
  const Device dev{DeviceType::kCUDA, 0};
  DeviceAllocator previous = Storage::register_allocator(DeviceType::kCUDA, nullptr);
  EXPECT_FALSE(Storage::has_allocator(DeviceType::kCUDA));
  try {
    Storage::allocate(64, dev);
    ADD_FAILURE() << "expected an error without an allocator";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("no allocator is registered for cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("//dtensor/core/cuda:cuda_storage"), std::string::npos) << msg;
  }

  auto state = std::make_shared<FakeBackend::State>();
  auto alloc = std::make_shared<CachingAllocator>(std::make_unique<FakeBackend>(state));
  Storage::register_allocator(DeviceType::kCUDA, [alloc](size_t n, Device d) {
    void* p = alloc->allocate(d.index, n, nullptr);
    return Storage::borrow(p, n, d, [alloc, p] { alloc->free(p); });
  });
  EXPECT_TRUE(Storage::has_allocator(DeviceType::kCUDA));
  {
    Tensor t = Tensor::empty({4, 8}, DType::kFloat32, dev);  // never touched on the host
    EXPECT_EQ(t.device(), dev);
    EXPECT_EQ(t.storage()->nbytes(), 128u);
    EXPECT_EQ(alloc->stats(0).allocated_bytes, 512);
  }
  EXPECT_EQ(alloc->stats(0).frees, 1);
  EXPECT_EQ(alloc->stats(0).allocated_bytes, 0);
  EXPECT_TRUE(Storage::allocate(16).get()->device().is_cpu());  // the CPU path is unchanged
  EXPECT_THROW(Storage::register_allocator(DeviceType::kCPU, nullptr), Error);

  Storage::register_allocator(DeviceType::kCUDA, previous);
}

}  // namespace
}  // namespace dtensor::cuda
