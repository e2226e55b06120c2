#include "dtensor/core/cuda/caching_allocator.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "dtensor/core/error.h"

namespace dtensor::cuda {
namespace {

std::string bytes_str(int64_t b) {
  if (b >= (int64_t{1} << 30)) return absl::StrFormat("%.2f GiB", b / double(int64_t{1} << 30));
  if (b >= (int64_t{1} << 20)) return absl::StrFormat("%.2f MiB", b / double(int64_t{1} << 20));
  if (b >= 1024) return absl::StrFormat("%.2f KiB", b / 1024.0);
  return absl::StrFormat("%d B", b);
}

std::string ptr_str(const void* p) { return absl::StrFormat("%p", p); }

}  // namespace

std::string AllocatorStats::str() const {
  return absl::StrCat("allocated ", bytes_str(allocated_bytes), " (peak ",
                      bytes_str(peak_allocated_bytes), "), reserved ", bytes_str(reserved_bytes),
                      " (peak ", bytes_str(peak_reserved_bytes), "), cached ",
                      bytes_str(cached_bytes), ", pending ", bytes_str(pending_bytes), "; ",
                      allocations, " allocations, ", cache_hits, " cache hits, ", backend_mallocs,
                      " device mallocs, ", ooms, " out-of-memory failures");
}

size_t CachingAllocator::round_size(size_t nbytes) {
  if (nbytes <= kSmallLimit) {
    size_t n = std::max(nbytes, size_t{1});
    return (n + kMinBlock - 1) / kMinBlock * kMinBlock;
  }
  return (nbytes + kLargeGranule - 1) / kLargeGranule * kLargeGranule;
}

size_t CachingAllocator::max_reuse_size(size_t rounded) {
  return rounded <= kSmallLimit ? 2 * rounded : rounded + rounded / 4;
}

CachingAllocator::CachingAllocator(std::unique_ptr<MemoryBackend> backend)
    : backend_(std::move(backend)) {
  DT_CHECK(backend_ != nullptr, "CachingAllocator: null backend");
}

CachingAllocator::~CachingAllocator() {
  try {
    empty_cache();
  } catch (const std::exception&) {
    // The runtime may already be shutting down; nothing useful to do.
  }
}

AllocatorStats& CachingAllocator::stats_locked(int device) { return stats_[device]; }

void* CachingAllocator::allocate(int device, size_t nbytes, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  process_pending_locked(/*wait=*/false);
  const size_t size = round_size(nbytes);
  AllocatorStats& st = stats_locked(device);
  Block* block = nullptr;

  auto fl = free_.find({device, stream});
  if (fl != free_.end()) {
    auto it = fl->second.lower_bound(size);
    if (it != fl->second.end() && it->first <= max_reuse_size(size)) {
      block = it->second;
      fl->second.erase(it);
      st.cached_bytes -= static_cast<int64_t>(block->size);
      ++st.cache_hits;
    }
  }
  if (block == nullptr) {
    void* p = backend_->malloc(device, size);
    if (p == nullptr) {
      // Out of memory: give the cache back and retry once.
      ++st.cache_flushes;
      process_pending_locked(/*wait=*/true);
      release_cached_locked(device);
      p = backend_->malloc(device, size);
    }
    if (p == nullptr) {
      ++st.ooms;
      DT_FAIL("CUDA out of memory on cuda:", device, ": cannot allocate ", bytes_str(nbytes),
              " (block of ", bytes_str(size), "); this process's allocator: ", st.str());
    }
    ++st.backend_mallocs;
    st.reserved_bytes += static_cast<int64_t>(size);
    st.peak_reserved_bytes = std::max(st.peak_reserved_bytes, st.reserved_bytes);
    auto owned = std::make_unique<Block>(Block{device, stream, size, 0, p, {}});
    block = owned.get();
    blocks_.emplace(p, std::move(owned));
  }
  block->requested = nbytes;
  block->other_streams.clear();
  ++st.allocations;
  st.allocated_bytes += static_cast<int64_t>(block->size);
  st.requested_bytes += static_cast<int64_t>(nbytes);
  st.peak_allocated_bytes = std::max(st.peak_allocated_bytes, st.allocated_bytes);
  return block->ptr;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  DT_CHECK(it != blocks_.end(), "CachingAllocator::free: pointer ", ptr_str(ptr),
           " was not allocated by this allocator");
  Block* b = it->second.get();
  AllocatorStats& st = stats_locked(b->device);
  ++st.frees;
  st.allocated_bytes -= static_cast<int64_t>(b->size);
  st.requested_bytes -= static_cast<int64_t>(b->requested);
  if (b->other_streams.empty()) {
    free_[{b->device, b->stream}].emplace(b->size, b);
    st.cached_bytes += static_cast<int64_t>(b->size);
    return;
  }
  Pending p{b, {}};
  for (StreamId s : b->other_streams) p.events.push_back(backend_->record_event(b->device, s));
  b->other_streams.clear();
  st.pending_bytes += static_cast<int64_t>(b->size);
  pending_.push_back(std::move(p));
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  DT_CHECK(it != blocks_.end(), "CachingAllocator::record_stream: pointer ", ptr_str(ptr),
           " was not allocated by this allocator");
  Block* b = it->second.get();
  if (stream == b->stream) return;
  if (std::find(b->other_streams.begin(), b->other_streams.end(), stream) ==
      b->other_streams.end()) {
    b->other_streams.push_back(stream);
  }
}

void CachingAllocator::process_pending_locked(bool wait) {
  std::vector<Pending> still;
  for (Pending& p : pending_) {
    bool done = true;
    for (EventId e : p.events) {
      if (wait) {
        backend_->synchronize_event(e);
      } else if (!backend_->query_event(e)) {
        done = false;
        break;
      }
    }
    if (!done) {
      still.push_back(std::move(p));
      continue;
    }
    for (EventId e : p.events) backend_->destroy_event(e);
    Block* b = p.block;
    AllocatorStats& st = stats_locked(b->device);
    st.pending_bytes -= static_cast<int64_t>(b->size);
    st.cached_bytes += static_cast<int64_t>(b->size);
    free_[{b->device, b->stream}].emplace(b->size, b);
  }
  pending_ = std::move(still);
}

void CachingAllocator::release_cached_locked(int device) {
  for (auto& [key, list] : free_) {
    if (device >= 0 && key.first != device) continue;
    for (auto& [size, b] : list) {
      void* ptr = b->ptr;
      AllocatorStats& st = stats_locked(b->device);
      backend_->free(b->device, ptr);
      ++st.backend_frees;
      st.cached_bytes -= static_cast<int64_t>(size);
      st.reserved_bytes -= static_cast<int64_t>(size);
      blocks_.erase(ptr);
    }
    list.clear();
  }
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mu_);
  process_pending_locked(/*wait=*/true);
  release_cached_locked(-1);
}

AllocatorStats CachingAllocator::stats(int device) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stats_.find(device);
  return it == stats_.end() ? AllocatorStats{} : it->second;
}

void CachingAllocator::reset_peak_stats(int device) {
  std::lock_guard<std::mutex> lock(mu_);
  AllocatorStats& st = stats_locked(device);
  st.peak_allocated_bytes = st.allocated_bytes;
  st.peak_reserved_bytes = st.reserved_bytes;
}

size_t CachingAllocator::block_size(void* ptr) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = blocks_.find(ptr);
  return it == blocks_.end() ? 0 : it->second->size;
}

}  // namespace dtensor::cuda
