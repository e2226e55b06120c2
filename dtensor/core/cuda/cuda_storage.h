// CUDA storage: the process's caching allocator behind Storage::allocate for DeviceType::kCUDA, and
// copies between host and devices.
//
// Linking //dtensor/core/cuda:cuda_storage registers the allocator (at static initialization; no
// CUDA call happens until the first allocation), so Tensor::empty(shape, dtype, Device{kCUDA, i})
// returns device memory. Allocations go to the calling thread's current stream of that device
// (cuda_util.h) and are reused in stream order (caching_allocator.h).
//
// A CUDA tensor's data pointer is device memory: data<T>() must not be dereferenced on the host.
// The core's copies (copy_, clone, to(dtype), to(Device), contiguous, fill_, item, to_vector) work
// on it once //kernels/cuda is linked (it registers the kCUDA device copy); without it they throw
// naming the library. to_device() below moves bytes between devices without a cast.
#pragma once

#include <cuda_runtime_api.h>

#include "dtensor/core/cuda/caching_allocator.h"
#include "dtensor/core/tensor.h"

namespace dtensor::cuda {

// The allocator of CUDA storage (created on first use, lives until the process ends).
CachingAllocator& allocator();
// Installs the allocator for DeviceType::kCUDA in Storage (idempotent; linking the library does
// it).
void register_storage_allocator();

AllocatorStats memory_stats(int device);
void reset_peak_memory_stats(int device);
// Returns the cached blocks of every device to the driver (cudaFree).
void empty_cache();
// Marks t's memory as used by work queued on `stream`, so that it is not reused before that work
// completes once t is freed (needed when a stream other than the allocating one reads t).
void record_stream(const Tensor& t, cudaStream_t stream);

}  // namespace dtensor::cuda

namespace dtensor {

// A copy of t on `device`, contiguous, same shape and dtype; t itself when it is already there.
// cpu -> cuda, cuda -> cpu and cuda:i -> cuda:j, through the current streams of the devices
// involved; returns once the copy is complete (the source may be freed or modified). Any strides
// are accepted. Throws dtensor::Error for a device that does not exist or a failed copy.
Tensor to_device(const Tensor& t, Device device);

}  // namespace dtensor
