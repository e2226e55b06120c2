#include "dtensor/core/cuda/cuda_storage.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "dtensor/core/cuda/cuda_util.h"

namespace dtensor::cuda {
namespace {

class CudaMemoryBackend : public MemoryBackend {
 public:
  void* malloc(int device, size_t nbytes) override {
    DeviceGuard guard(device);
    void* p = nullptr;
    cudaError_t err = cudaMalloc(&p, nbytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      return nullptr;
    }
    DT_CUDA_CHECK(err, "cudaMalloc of ", nbytes, " bytes on cuda:", device);
    return p;
  }
  void free(int device, void* ptr) override {
    DeviceGuard guard(device);
    DT_CUDA_CHECK(cudaFree(ptr), "cudaFree on cuda:", device);
  }
  EventId record_event(int device, StreamId stream) override {
    DeviceGuard guard(device);
    cudaEvent_t e;
    DT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "allocator event");
    DT_CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(stream)), "allocator event");
    return e;
  }
  bool query_event(EventId event) override {
    cudaError_t err = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (err == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    DT_CUDA_CHECK(err, "allocator event query");
    return true;
  }
  void synchronize_event(EventId event) override {
    DT_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(event)), "allocator event");
  }
  void destroy_event(EventId event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }
};

std::shared_ptr<Storage> allocate_cuda(size_t nbytes, Device device) {
  check_device(device, "Storage::allocate");
  DeviceGuard guard(device.index);
  void* p = allocator().allocate(device.index, nbytes, current_stream(device.index));
  return Storage::borrow(p, nbytes, device, [p] {
    try {
      allocator().free(p);
    } catch (const std::exception& e) {  // a deleter must not throw (~Storage is noexcept)
      std::fprintf(stderr, "dtensor: freeing CUDA storage failed: %s\n", e.what());
    }
  });
}

// Registered when the library is linked (alwayslink).
const bool kRegistered = (register_storage_allocator(), true);

// Byte range [lo, hi) of t's storage that its elements occupy.
std::pair<int64_t, int64_t> byte_span(const Tensor& t) {
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    int64_t ext = (t.size(d) - 1) * t.stride(d);
    (ext < 0 ? lo : hi) += ext;
  }
  const int64_t item = static_cast<int64_t>(t.element_size());
  return {lo * item, (hi + 1) * item};
}

void sync_current(int device, const char* what) {
  DeviceGuard guard(device);
  DT_CUDA_CHECK(cudaStreamSynchronize(current_stream(device)), what);
}

}  // namespace

CachingAllocator& allocator() {
  static CachingAllocator* a = new CachingAllocator(std::make_unique<CudaMemoryBackend>());
  return *a;  // never destroyed: storages may be released during static destruction
}

void register_storage_allocator() {
  if (!Storage::has_allocator(DeviceType::kCUDA)) {
    Storage::register_allocator(DeviceType::kCUDA, allocate_cuda);
  }
}

AllocatorStats memory_stats(int device) { return allocator().stats(device); }
void reset_peak_memory_stats(int device) { allocator().reset_peak_stats(device); }
void empty_cache() { allocator().empty_cache(); }

void record_stream(const Tensor& t, cudaStream_t stream) {
  DT_CHECK(t.defined() && t.device().is_cuda(), "record_stream: expected a CUDA tensor, got ",
           t.defined() ? t.str() : std::string("an undefined tensor"));
  allocator().record_stream(t.storage()->data(), stream);
}

}  // namespace dtensor::cuda

namespace dtensor {

Tensor to_device(const Tensor& t, Device device) {
  using namespace cuda;
  DT_CHECK(t.defined(), "to_device: undefined tensor");
  const Device src = t.device();
  if (src == device) return t;
  const std::string what = absl::StrCat("to_device(", t.str(), " -> ", device.str(), ")");
  if (src.is_cuda()) check_device(src, what.c_str());
  if (device.is_cuda()) check_device(device, what.c_str());
  register_storage_allocator();

  if (src.is_cpu()) {  // host -> device
    Tensor host = t.contiguous();
    Tensor out = Tensor::empty(t.sizes(), t.dtype(), device);
    if (out.nbytes() == 0) return out;
    DeviceGuard guard(device.index);
    cudaStream_t s = current_stream(device.index);
    DT_CUDA_CHECK(
        cudaMemcpyAsync(out.data_ptr(), host.data_ptr(), out.nbytes(), cudaMemcpyHostToDevice, s),
        what);
    DT_CUDA_CHECK(cudaStreamSynchronize(s), what);
    return out;
  }

  if (t.numel() == 0) return Tensor::empty(t.sizes(), t.dtype(), device);
  // From a device: copy the bytes the view spans, then make it contiguous where it landed.
  auto [lo, hi] = byte_span(t);
  const int64_t item = static_cast<int64_t>(t.element_size());
  const char* base = static_cast<const char*>(t.storage()->data());
  if (device.is_cpu()) {  // device -> host
    auto storage = Storage::allocate(static_cast<size_t>(hi - lo));
    DeviceGuard guard(src.index);
    cudaStream_t s = current_stream(src.index);
    DT_CUDA_CHECK(cudaMemcpyAsync(storage->data(), base + lo, static_cast<size_t>(hi - lo),
                                  cudaMemcpyDeviceToHost, s),
                  what);
    DT_CUDA_CHECK(cudaStreamSynchronize(s), what);
    return Tensor::from_storage(storage, t.storage_offset() - lo / item, t.sizes(), t.strides(),
                                t.dtype())
        .contiguous();
  }
  // Device -> other device: contiguous views go peer to peer, others through the host.
  if (!t.is_contiguous()) return to_device(to_device(t, cpu()), device);
  Tensor out = Tensor::empty(t.sizes(), t.dtype(), device);
  sync_current(src.index, what.c_str());
  DeviceGuard guard(device.index);
  cudaStream_t s = current_stream(device.index);
  DT_CUDA_CHECK(
      cudaMemcpyPeerAsync(out.data_ptr(), device.index, t.data_ptr(), src.index, out.nbytes(), s),
      what);
  DT_CUDA_CHECK(cudaStreamSynchronize(s), what);
  return out;
}

}  // namespace dtensor
