// The kCUDA copy function of dtensor/core (register_device_copy), installed when //kernels/cuda is
// linked, so that Tensor::copy_ / to(Device) / clone / contiguous / fill_ / item work on CUDA
// tensors. Same device: the cast-and-stride copy kernel (kernels::cuda::copy_). Across devices the
// bytes move first (to_device: contiguous, synchronous), then the cast-and-stride copy runs where
// the destination is.
#include "dtensor/core/cuda/cuda_storage.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {
namespace {

void copy_with_cuda(Tensor& dst, const Tensor& src) {
  const Device dd = dst.device(), sd = src.device();
  if (dd == sd) {
    copy_(dst, src);
  } else if (dd.is_cuda()) {
    Tensor moved = ::dtensor::to_device(src, dd);
    copy_(dst, moved);
  } else {
    Tensor host = ::dtensor::to_device(src, dd);  // complete on return
    dst.copy_(host);
  }
}

const bool registered = [] {
  ::dtensor::cuda::register_storage_allocator();
  register_device_copy(DeviceType::kCUDA, copy_with_cuda);
  return true;
}();

}  // namespace
}  // namespace dtensor::kernels::cuda
