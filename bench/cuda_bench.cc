// GPU benchmarks of the CUDA kernels (Google Benchmark; times from CUDA events, manual time).
// Built everywhere the toolkit is; run on a GPU machine:
//   bazel run -c opt //bench:cuda_bench -- --benchmark_counters_tabular=true
//
// Memory-bound kernels report `GB/s`, `of_HBM` and `of_copy`: bytes that must move (each input read
// once, each output written once; listed per benchmark) / time, as a fraction of the device's peak
// HBM bandwidth (2 x memory clock x bus width, from cudaDeviceGetAttribute) and of the bandwidth a
// device-to-device cudaMemcpy of 1 GiB reaches on this device (measured once, median of 9; the
// attainable ceiling, which the datasheet peak is not). Inputs are >= 64 MB.
// Compute-bound ones report `TFLOP/s`: GEMM 2 m n k; causal attention forward 2 * 2 b h s^2 d / 2
// (two products, half of the score matrix).
//   scans      cumsum / cummax along rows of [4096, 4096] float32 and along one row of 2^24
//   median     median_dim of [4096, 4096] float32 rows and the whole-tensor median of 2^24
//   pooling    max_pool2d 3x3 / 2 and avg_pool2d 3x3 / 2 (+ backward) on [32, 64, 128, 128]
//   softmax    rows of [8192, 4096] float32 and bfloat16
//   GEMM       bfloat16 8192^3 through kernels::cuda::mm, and cuBLAS called directly
//              (cublasGemmEx, bfloat16 in and out, float32 compute) for comparison
//   copy       cudaMemcpyAsync device to device of 1 GiB (the `of_copy` reference)
//   attention  scaled_dot_product_attention forward, bfloat16, b=4 h=32 s=4096 d=128 causal (cuDNN
//              and the float32 math kernel), and its backward through cuDNN: 2.5 x the forward's
//              FLOPs (five products against two), the usual flash-attention count
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "dtensor/core/cuda/cuda_storage.h"
#include "dtensor/core/cuda/cuda_util.h"
#include "kernels/cuda/kernels.h"

namespace dtensor {
namespace {

namespace C = ::dtensor::kernels::cuda;

Device gpu() { return Device{DeviceType::kCUDA, 0}; }

double peak_hbm_bytes_per_s() {
  int clock_khz = 0, bus_bits = 0;
  cudaDeviceGetAttribute(&clock_khz, cudaDevAttrMemoryClockRate, 0);
  cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, 0);
  return 2.0 * clock_khz * 1e3 * bus_bits / 8.0;
}

bool skip_without_gpu(benchmark::State& state) {
  if (cuda::is_available()) return false;
  state.SkipWithError(("no CUDA device: " + cuda::unavailable_reason()).c_str());
  return true;
}

// Uniform values in [-1, 1) on the device, from a host tensor.
Tensor device_rand(const Shape& s, DType dt, uint64_t seed = 1) {
  Tensor h = Tensor::empty(s, DType::kFloat32);
  float* p = h.data<float>();
  uint64_t x = seed;
  for (int64_t i = 0; i < h.numel(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<double>(x >> 40) / 16777216.0 * 2 - 1);
  }
  return C::to(to_device(h, gpu()), dt);
}

// Times `f` with CUDA events on the current (default) stream; one warm-up call.
void run_timed(benchmark::State& state, const std::function<void()>& f) {
  f();
  cudaDeviceSynchronize();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  for (auto _ : state) {
    cudaEventRecord(start, cuda::current_stream(0));
    f();
    cudaEventRecord(stop, cuda::current_stream(0));
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// Bytes per second of a device-to-device copy of 1 GiB (read + write counted), median of 9 timed
// copies after one warm-up; measured on first use.
double measured_copy_bytes_per_s() {
  static const double rate = [] {
    const size_t n = size_t{1} << 30;
    void *src = nullptr, *dst = nullptr;
    if (cudaMalloc(&src, n) != cudaSuccess || cudaMalloc(&dst, n) != cudaSuccess) return 0.0;
    cudaMemset(src, 1, n);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    std::vector<float> ms(9);
    cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice);
    for (float& m : ms) {
      cudaEventRecord(start);
      cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice);
      cudaEventRecord(stop);
      cudaEventSynchronize(stop);
      cudaEventElapsedTime(&m, start, stop);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    cudaFree(src);
    cudaFree(dst);
    std::sort(ms.begin(), ms.end());
    return 2.0 * n / (ms[ms.size() / 2] / 1e3);
  }();
  return rate;
}

void bandwidth(benchmark::State& state, double bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(bytes) * state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["of_HBM"] = benchmark::Counter(bytes / peak_hbm_bytes_per_s(),
                                                benchmark::Counter::kIsIterationInvariantRate);
  if (const double copy = measured_copy_bytes_per_s(); copy > 0)
    state.counters["of_copy"] =
        benchmark::Counter(bytes / copy, benchmark::Counter::kIsIterationInvariantRate);
}

void flops(benchmark::State& state, double f) {
  state.counters["TFLOP/s"] =
      benchmark::Counter(f / 1e12, benchmark::Counter::kIsIterationInvariantRate);
}

// ---- The reference: a device-to-device copy of 1 GiB (read + write).
void BM_DeviceCopy(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const size_t n = size_t{1} << 30;
  Tensor src = C::empty({static_cast<int64_t>(n / 4)}, DType::kFloat32, gpu());
  Tensor dst = C::empty({static_cast<int64_t>(n / 4)}, DType::kFloat32, gpu());
  run_timed(state, [&] {
    cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), n, cudaMemcpyDeviceToDevice,
                    cuda::current_stream(0));
  });
  bandwidth(state, 2.0 * n);
}
BENCHMARK(BM_DeviceCopy)->UseManualTime()->Unit(benchmark::kMicrosecond);

// ---- Scans: read + write of the values (cummax also writes int64 indices).
void BM_Cumsum(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int64_t rows = state.range(0), n = state.range(1);
  Tensor x = device_rand({rows, n}, DType::kFloat32);
  run_timed(state, [&] { C::cumsum(x, 1); });
  bandwidth(state, 2.0 * x.nbytes());
}
BENCHMARK(BM_Cumsum)
    ->Args({4096, 4096})
    ->Args({1, 1 << 24})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

void BM_Cummax(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int64_t rows = state.range(0), n = state.range(1);
  Tensor x = device_rand({rows, n}, DType::kFloat32);
  run_timed(state, [&] { C::cummax(x, 1); });
  bandwidth(state, 2.0 * x.nbytes() + 8.0 * x.numel());
}
BENCHMARK(BM_Cummax)
    ->Args({4096, 4096})
    ->Args({1, 1 << 24})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// ---- Median: one read of the input (the lower bound; the radix sort moves several times more).
void BM_MedianDim(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor x = device_rand({state.range(0), state.range(1)}, DType::kFloat32);
  run_timed(state, [&] { C::median_dim(x, 1, false); });
  bandwidth(state, 1.0 * x.nbytes());
}
BENCHMARK(BM_MedianDim)->Args({4096, 4096})->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_MedianAll(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor x = device_rand({state.range(0)}, DType::kFloat32);
  run_timed(state, [&] { C::median(x); });
  bandwidth(state, 1.0 * x.nbytes());
}
BENCHMARK(BM_MedianAll)->Arg(1 << 24)->UseManualTime()->Unit(benchmark::kMicrosecond);

// ---- Pooling 3x3 stride 2 on [32, 64, 128, 128] float32 (128 MiB): input read + outputs written
// (max: values and int64 indices; backward: grad_out (+ indices) read, grad_in written).
const Shape kPoolShape{32, 64, 128, 128};

void BM_MaxPool2d(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor x = device_rand(kPoolShape, DType::kFloat32);
  std::pair<Tensor, Tensor> r;
  run_timed(state, [&] { r = C::max_pool_with_indices(x, 2, {3}, {2}, {1}, {}, false); });
  bandwidth(state, x.nbytes() + r.first.nbytes() + r.second.nbytes());
}
BENCHMARK(BM_MaxPool2d)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_MaxPool2dBackward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor x = device_rand(kPoolShape, DType::kFloat32);
  auto r = C::max_pool_with_indices(x, 2, {3}, {2}, {1}, {}, false);
  run_timed(state, [&] { C::max_pool_backward(r.first, r.second, x.sizes(), 2); });
  bandwidth(state, r.first.nbytes() + r.second.nbytes() + x.nbytes());
}
BENCHMARK(BM_MaxPool2dBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_AvgPool2d(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor x = device_rand(kPoolShape, DType::kFloat32);
  Tensor y;
  run_timed(state, [&] { y = C::avg_pool(x, 2, {3}, {2}, {1}, false, true, std::nullopt); });
  bandwidth(state, x.nbytes() + y.nbytes());
}
BENCHMARK(BM_AvgPool2d)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_AvgPool2dBackward(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor x = device_rand(kPoolShape, DType::kFloat32);
  Tensor y = C::avg_pool(x, 2, {3}, {2}, {1}, false, true, std::nullopt);
  run_timed(state,
            [&] { C::avg_pool_backward(y, x, 2, {3}, {2}, {1}, false, true, std::nullopt); });
  bandwidth(state, y.nbytes() + x.nbytes());
}
BENCHMARK(BM_AvgPool2dBackward)->UseManualTime()->Unit(benchmark::kMicrosecond);

// ---- Softmax over rows of [8192, 4096]: read + write.
void BM_Softmax(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const DType dt = state.range(0) == 0 ? DType::kFloat32 : DType::kBFloat16;
  state.SetLabel(dtype_name(dt));
  Tensor x = device_rand({8192, 4096}, dt);
  run_timed(state, [&] { C::softmax(x, 1); });
  bandwidth(state, 2.0 * x.nbytes());
}
BENCHMARK(BM_Softmax)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

// ---- bfloat16 GEMM 8192^3.
constexpr int64_t kGemm = 8192;

void BM_GemmBf16(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor a = device_rand({kGemm, kGemm}, DType::kBFloat16, 1);
  Tensor b = device_rand({kGemm, kGemm}, DType::kBFloat16, 2);
  run_timed(state, [&] { C::mm(a, b); });
  flops(state, 2.0 * kGemm * kGemm * kGemm);
}
BENCHMARK(BM_GemmBf16)->UseManualTime()->Unit(benchmark::kMillisecond);

void BM_GemmBf16CublasDirect(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  Tensor a = device_rand({kGemm, kGemm}, DType::kBFloat16, 1);
  Tensor b = device_rand({kGemm, kGemm}, DType::kBFloat16, 2);
  Tensor c = C::empty({kGemm, kGemm}, DType::kBFloat16, gpu());
  cublasHandle_t h;
  cublasCreate(&h);
  cublasSetStream(h, cuda::current_stream(0));
  const float alpha = 1, beta = 0;
  const int n = static_cast<int>(kGemm);
  run_timed(state, [&] {
    // Row-major C = A B as column-major C^T = B^T A^T.
    cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, b.data_ptr(), CUDA_R_16BF, n,
                 a.data_ptr(), CUDA_R_16BF, n, &beta, c.data_ptr(), CUDA_R_16BF, n,
                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  });
  cublasDestroy(h);
  flops(state, 2.0 * kGemm * kGemm * kGemm);
}
BENCHMARK(BM_GemmBf16CublasDirect)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- Attention forward, bfloat16, causal.
void BM_SdpaForwardBf16Causal(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int64_t b = 4, h = 32, s = 4096, d = 128;
  const auto backend =
      state.range(0) == 0 ? C::AttentionBackend::kCudnn : C::AttentionBackend::kMath;
  state.SetLabel(state.range(0) == 0 ? "cudnn" : "math (float32 kernel)");
  if (backend == C::AttentionBackend::kCudnn && !C::cudnn_attention_built()) {
    state.SkipWithError("built without cuDNN's C++ frontend");
    return;
  }
  Tensor q = device_rand({b, h, s, d}, DType::kBFloat16, 3);
  Tensor k = device_rand({b, h, s, d}, DType::kBFloat16, 4);
  Tensor v = device_rand({b, h, s, d}, DType::kBFloat16, 5);
  run_timed(state, [&] {
    C::scaled_dot_product_attention(q, k, v, std::nullopt, true, std::nullopt, 0, backend);
  });
  flops(state, 4.0 * b * h * s * s * d / 2);
}
BENCHMARK(BM_SdpaForwardBf16Causal)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// ---- Attention backward through cuDNN, bfloat16, causal, with the forward's lse.
void BM_SdpaBackwardBf16Causal(benchmark::State& state) {
  if (skip_without_gpu(state)) return;
  const int64_t b = 4, h = 32, s = 4096, d = 128;
  state.SetLabel("cudnn");
  if (!C::cudnn_attention_built()) {
    state.SkipWithError("built without cuDNN's C++ frontend");
    return;
  }
  Tensor q = device_rand({b, h, s, d}, DType::kBFloat16, 3);
  Tensor k = device_rand({b, h, s, d}, DType::kBFloat16, 4);
  Tensor v = device_rand({b, h, s, d}, DType::kBFloat16, 5);
  Tensor g = device_rand({b, h, s, d}, DType::kBFloat16, 6);
  C::AttentionWithLse fwd = C::scaled_dot_product_attention_with_lse(
      q, k, v, std::nullopt, true, std::nullopt, 0, C::AttentionBackend::kCudnn);
  run_timed(state, [&] {
    C::scaled_dot_product_attention_backward(g, q, k, v, fwd.out, true, std::nullopt,
                                             std::nullopt, 0, fwd.lse, C::AttentionBackend::kCudnn);
  });
  flops(state, 2.5 * 4.0 * b * h * s * s * d / 2);
}
BENCHMARK(BM_SdpaBackwardBf16Causal)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dtensor

BENCHMARK_MAIN();
