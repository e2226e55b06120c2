// Internal to //kernels/cuda: host-side helpers of the wrappers (argument checks, streams,
// workspaces, operands of the elementwise launchers).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "dtensor/core/cuda/cuda_util.h"
#include "dtensor/core/tensor.h"
#include "kernels/cuda/launch.h"

namespace dtensor::kernels::cuda::detail {

// Throws unless t is a defined tensor on an existing CUDA device; `what` names the argument.
void check_cuda(const char* op, const Tensor& t, const char* what = "input");
// Throws unless b is on a's device.
void check_same_device(const char* op, const Tensor& a, const Tensor& b, const char* what);
void check_floating(const char* op, const Tensor& t, const char* what = "input");

// The current stream of t's device (for this thread).
inline cudaStream_t stream_of(const Tensor& t) {
  return ::dtensor::cuda::current_stream(t.device().index);
}
// Throws dtensor::Error naming `op` when the last launch failed.
void check_launch(const char* op);

Compute compute_of(DType t);  // float32/bfloat16/float16 -> kFloat, float64 -> kDouble, else kInt64
DType dtype_of(Compute c);    // kFloat -> float32, kDouble -> float64, kInt64 -> int64

// Device scratch memory of `bytes` (from the caching allocator; freed with the tensor).
Tensor workspace(size_t bytes, Device device);

// The broadcast shape of a and b, or an Error naming `op` and both shapes (the CPU kernels' rule
// and message).
Shape broadcast_op(const char* op, const Shape& a, const Shape& b);

// t viewed over `shape` (broadcast: expand) as a launcher operand.
Operand operand(const Tensor& t, const Shape& shape);
Operand scalar_operand(double d, int64_t i, DType dtype);
// The loop over `shape`; contiguous when every tensor in `tensors` is contiguous and of `shape`.
LoopShape loop_shape(const char* op, const Shape& shape, const std::vector<const Tensor*>& tensors);

// A [outer, n, inner] contiguous view of x for an op along dims [d0, d1] (x made contiguous first
// when needed, by a device copy).
struct Blocked {
  Tensor t;  // contiguous
  int64_t outer = 1, n = 1, inner = 1;
};
Blocked blocked(const Tensor& x, int64_t d0, int64_t d1);

// Reads the two-int64 error record of launch_embedding / launch_max_pool_backward (synchronizes
// the stream); returns {flag, value}.
std::pair<int64_t, int64_t> read_error_record(const Tensor& record);

}  // namespace dtensor::kernels::cuda::detail
