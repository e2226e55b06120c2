// CUDA runtime helpers shared by the CUDA libraries: error checks that throw dtensor::Error,
// device discovery that never throws (for tests that skip without a GPU), and the per-thread
// current stream of each device that kernels, copies and the allocator use.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "dtensor/core/device.h"
#include "dtensor/core/error.h"

namespace dtensor::cuda {

// Throws dtensor::Error "<context>: <expr> failed: <cudaGetErrorString> (<cudaGetErrorName>)".
[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const std::string& context);

}  // namespace dtensor::cuda

// DT_CUDA_CHECK(expr, context parts...): throws dtensor::Error when expr is not cudaSuccess.
#define DT_CUDA_CHECK(expr, ...)                                                           \
  do {                                                                                     \
    cudaError_t dt_cuda_err_ = (expr);                                                     \
    if (dt_cuda_err_ != cudaSuccess)                                                       \
      ::dtensor::cuda::throw_cuda_error(dt_cuda_err_, #expr, ::absl::StrCat(__VA_ARGS__)); \
  } while (0)

namespace dtensor::cuda {

// Number of CUDA devices this process can use; 0 when there is no driver or no device. Never
// throws (the first answer is cached).
int device_count();
inline bool is_available() { return device_count() > 0; }
// Why device_count() is 0 ("" when it is not), e.g. "cudaGetDeviceCount: CUDA driver version is
// insufficient for CUDA runtime version (cudaErrorInsufficientDriver)".
std::string unavailable_reason();
// Throws dtensor::Error naming `what` unless d is a CUDA device of this machine.
void check_device(const Device& d, const char* what);

// The stream that work on `device` goes to from this thread: the legacy default stream (nullptr)
// unless a StreamGuard says otherwise.
cudaStream_t current_stream(int device);
void set_current_stream(int device, cudaStream_t stream);

// Sets the current device for the scope (cudaSetDevice), restoring the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Makes `stream` the current stream of `device` for this thread for the scope.
class StreamGuard {
 public:
  StreamGuard(int device, cudaStream_t stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int device_;
  cudaStream_t previous_;
};

// An owned non-blocking stream on a device.
class Stream {
 public:
  explicit Stream(int device, int priority = 0);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  void synchronize() const;

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace dtensor::cuda
