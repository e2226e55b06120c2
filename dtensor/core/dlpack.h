// Zero-copy exchange with other frameworks through DLPack (dlpack.h v0.6 from Debian's libdlpack-dev).
#pragma once

#include "dlpack/dlpack.h"
#include "dtensor/core/tensor.h"

namespace dtensor {

// DLPack >= 0.8 spells bool as type code 6 (kDLBool); v0.6's header predates it, so it is named here.
inline constexpr uint8_t kDLBoolCode = 6;

// Wraps a DLManagedTensor without copying; the tensor takes ownership and calls its deleter when the
// last view goes. Supported: CPU (and CUDA) devices; dtypes float32/64, bfloat16, float16, int64,
// int32, int16, int8, uint8, bool (code 6, 8 bits) with lanes == 1; null strides mean row-major.
// Throws dtensor::Error (and leaves ownership with the caller) for an unsupported dtype or device,
// a negative stride, or sizes, strides and byte_offset whose extent overflows int64 or passes the
// limits of dtensor/core/limits.h.
Tensor from_dlpack(DLManagedTensor* managed);

// Exports a view of `t` without copying; the returned tensor keeps t's storage alive until its
// deleter is called by the consumer.
DLManagedTensor* to_dlpack(const Tensor& t);

}  // namespace dtensor
