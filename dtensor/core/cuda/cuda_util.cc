#include "dtensor/core/cuda/cuda_util.h"

#include <map>
#include <mutex>

namespace dtensor::cuda {
namespace {

struct Discovery {
  int count = 0;
  std::string reason;
};

const Discovery& discovery() {
  static const Discovery d = [] {
    Discovery r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      r.reason = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorString(err), " (",
                              cudaGetErrorName(err), ")");
      cudaGetLastError();  // clear it, so that later calls do not report it
      return r;
    }
    r.count = n;
    if (n == 0) r.reason = "cudaGetDeviceCount: 0 devices";
    return r;
  }();
  return d;
}

thread_local std::map<int, cudaStream_t> current_streams;

}  // namespace

void throw_cuda_error(cudaError_t err, const char* expr, const std::string& context) {
  cudaGetLastError();  // a non-sticky error must not resurface in the next call
  throw Error(absl::StrCat(context.empty() ? "" : context + ": ", expr,
                           " failed: ", cudaGetErrorString(err), " (", cudaGetErrorName(err), ")"));
}

int device_count() { return discovery().count; }

std::string unavailable_reason() { return discovery().reason; }

void check_device(const Device& d, const char* what) {
  DT_CHECK(d.is_cuda(), what, ": expected a CUDA device, got ", d.str());
  const int n = device_count();
  DT_CHECK(n > 0, what, ": no CUDA device for ", d.str(), " (", unavailable_reason(), ")");
  DT_CHECK(d.index >= 0 && d.index < n, what, ": ", d.str(), " does not exist (this machine has ",
           n, " CUDA device", n == 1 ? "" : "s", ": cuda:0 to cuda:", n - 1, ")");
}

cudaStream_t current_stream(int device) {
  auto it = current_streams.find(device);
  return it == current_streams.end() ? nullptr : it->second;
}

void set_current_stream(int device, cudaStream_t stream) { current_streams[device] = stream; }

DeviceGuard::DeviceGuard(int device) {
  DT_CUDA_CHECK(cudaGetDevice(&previous_), "DeviceGuard");
  if (previous_ != device) {
    DT_CUDA_CHECK(cudaSetDevice(device), "DeviceGuard(cuda:", device, ")");
  } else {
    previous_ = -1;
  }
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

StreamGuard::StreamGuard(int device, cudaStream_t stream)
    : device_(device), previous_(current_stream(device)) {
  set_current_stream(device, stream);
}

StreamGuard::~StreamGuard() { set_current_stream(device_, previous_); }

Stream::Stream(int device, int priority) : device_(device) {
  DeviceGuard guard(device);
  DT_CUDA_CHECK(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority),
                "Stream(cuda:", device, ")");
}

Stream::~Stream() {
  if (stream_ != nullptr) {
    DeviceGuard guard(device_);
    cudaStreamDestroy(stream_);
  }
}

void Stream::synchronize() const {
  DT_CUDA_CHECK(cudaStreamSynchronize(stream_), "Stream::synchronize(cuda:", device_, ")");
}

}  // namespace dtensor::cuda
