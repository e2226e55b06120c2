// Internal to //kernels/cuda: cuDNN's fused flash attention through the graph API, via cuDNN's
// header-only C++ frontend (DESIGN §8). Built only when the frontend's headers were found
// (//tools/cuda:cuda_configure.bzl); otherwise every call throws saying so.
#pragma once

#include <string>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels::cuda::detail {

bool cudnn_sdpa_built();
// Why cuDNN's fused attention cannot run these operands ("" when our own checks pass; cuDNN may
// still refuse when the graph is built).
std::string cudnn_sdpa_unsupported(const Tensor& q, const Tensor& k, const Tensor& v);
// q [b, h, s_q, d], k / v [b, h, s_kv, d] (bfloat16 or float16, last dim contiguous) ->
// out [b, h, s_q, d] (contiguous, q's dtype) and lse [b, h, s_q] float32 (natural log).
// Graphs are built once per shape, strides, dtype and flags (per thread and device) and cached.
void cudnn_sdpa_forward(const Tensor& q, const Tensor& k, const Tensor& v, bool causal, float scale,
                        Tensor& out, Tensor& lse);
// dq, dk, dv (contiguous, shaped like q, k, v) from dout [b, h, s_q, d] and the forward's out and
// lse.
void cudnn_sdpa_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                         const Tensor& dout, const Tensor& lse, bool causal, float scale,
                         Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace dtensor::kernels::cuda::detail
