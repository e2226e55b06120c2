// Classification losses: per-element nll / cross-entropy terms over log-probabilities laid out as
// [outer, classes, inner], and nll_loss's backward. The reductions ("sum", "mean") are done by the
// host wrappers with the reduction kernels.
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;

template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};

__device__ __forceinline__ void report_bad(int64_t* bad, int64_t v) {
  bad[0] = 1;
  atomicExch(reinterpret_cast<unsigned long long*>(bad + 1), static_cast<unsigned long long>(v));
}

template <typename T>
__device__ __forceinline__ T weight_at(const ClassLoss& p, int64_t c) {
  return p.weight != nullptr ? static_cast<const T*>(p.weight)[c] : T(1);
}

// The class-sum term of element (o, i), summed over classes j in [j0, j1) with stride `step`:
// sum_j weight[j] * coef_j * input[j], coef_j = 1 (index targets) or (1 - ls) * q[j] + ls / C.
template <typename T>
__device__ __forceinline__ T class_sum(const ClassLoss& p, int64_t o, int64_t i, int64_t j0,
                                       int64_t step) {
  const T ls = static_cast<T>(p.label_smoothing);
  const T uniform = ls / static_cast<T>(p.classes);
  T s = 0;
  for (int64_t j = j0; j < p.classes; j += step) {
    const int64_t at = (o * p.classes + j) * p.inner + i;
    T coef = T(1);
    if (p.probs != nullptr) coef = (T(1) - ls) * load_as<T>(p.probs, p.probs_dtype, at) + uniform;
    s += weight_at<T>(p, j) * coef * load_as<T>(p.input, p.input_dtype, at);
  }
  return s;
}

// The loss of element k = o * inner + i given its class-sum term (unused without smoothing).
template <typename T>
__device__ __forceinline__ void finish_element(const ClassLoss& p, int64_t k, T sum, T* losses,
                                               T* weights, int64_t* bad) {
  if (p.probs != nullptr) {
    losses[k] = -sum;
    return;
  }
  const int64_t t = load_as<int64_t>(p.target, p.target_dtype, k);
  T loss = 0, w = 0;
  if (t != p.ignore_index) {
    if (t < 0 || t >= p.classes) {
      report_bad(bad, t);
    } else {
      const int64_t o = k / p.inner, i = k % p.inner;
      const T ls = static_cast<T>(p.label_smoothing);
      w = weight_at<T>(p, t);
      loss =
          -(T(1) - ls) * w * load_as<T>(p.input, p.input_dtype, (o * p.classes + t) * p.inner + i);
      if (p.smooth) loss += ls / static_cast<T>(p.classes) * -sum;
    }
  }
  losses[k] = loss;
  if (weights != nullptr) weights[k] = w;
}

// One thread per element (inner > 1, or no class sum needed).
template <typename T>
__global__ void class_loss_elements_kernel(ClassLoss p, T* losses, T* weights, int64_t* bad) {
  const int64_t total = p.outer * p.inner;
  const bool need_sum = p.probs != nullptr || p.smooth;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const T s = need_sum ? class_sum<T>(p, k / p.inner, k % p.inner, 0, 1) : T(0);
    finish_element<T>(p, k, s, losses, weights, bad);
  }
}

// One block per element (inner == 1 with a class sum: long contiguous rows).
template <typename T>
__global__ void class_loss_rows_kernel(ClassLoss p, T* losses, T* weights, int64_t* bad) {
  __shared__ T shared[32];
  for (int64_t k = blockIdx.x; k < p.outer; k += gridDim.x) {
    T s = class_sum<T>(p, k, 0, threadIdx.x, blockDim.x);
    s = block_reduce(s, SumOp<T>(), shared, T(0));
    if (threadIdx.x == 0) finish_element<T>(p, k, s, losses, weights, bad);
  }
}

template <typename T>
__global__ void nll_backward_kernel(const void* grad_output, DType grad_dtype, bool per_element,
                                    const void* target, DType target_dtype, int64_t n,
                                    int64_t c_local, int64_t class_start, int64_t num_classes,
                                    int64_t ignore_index, const T* weight, const T* divisor_ptr,
                                    T divisor_value, void* grad_input, DType out_dtype,
                                    int64_t* bad) {
  const int64_t total = n * c_local;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = k / c_local, col = k % c_local;
    const int64_t t = load_as<int64_t>(target, target_dtype, i);
    T v = 0;
    if (t != ignore_index) {
      if (t < 0 || t >= num_classes) {
        if (col == 0) report_bad(bad, t);
      } else if (t - class_start == col) {
        T g = load_as<T>(grad_output, grad_dtype, per_element ? i : 0);
        const T d = divisor_ptr != nullptr ? *divisor_ptr : divisor_value;
        g = g / d;
        v = -(weight != nullptr ? weight[t] : T(1)) * g;
      }
    }
    store_as<T>(grad_input, out_dtype, k, v);
  }
}

template <typename T>
__global__ void target_weights_kernel(const void* target, DType target_dtype, int64_t count,
                                      const T* weight, int64_t num_classes, int64_t ignore_index,
                                      T* weights) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < count;
       k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = load_as<int64_t>(target, target_dtype, k);
    T w = 0;
    if (t != ignore_index) {
      if (weight == nullptr)
        w = T(1);
      else if (t >= 0 && t < num_classes)
        w = weight[t];
    }
    weights[k] = w;
  }
}

}  // namespace

void launch_target_weights(Compute c, const void* target, DType target_dtype, int64_t count,
                           const void* weight, int64_t num_classes, int64_t ignore_index,
                           void* weights, cudaStream_t stream) {
  if (count == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      target_weights_kernel<T><<<grid_for(count, kThreads), kThreads, 0, stream>>>(
          target, target_dtype, count, static_cast<const T*>(weight), num_classes, ignore_index,
          static_cast<T*>(weights));
    }
  });
}

void launch_class_loss(const ClassLoss& p, Compute c, void* losses, void* weights,
                       int64_t* bad_index, cudaStream_t stream) {
  const int64_t total = p.outer * p.inner;
  if (total == 0) return;
  const bool need_sum = p.probs != nullptr || p.smooth;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      if (need_sum && p.inner == 1 && p.classes >= 64) {
        class_loss_rows_kernel<T><<<grid_for(p.outer, 1, 65535LL * 16), kThreads, 0, stream>>>(
            p, static_cast<T*>(losses), static_cast<T*>(weights), bad_index);
      } else {
        class_loss_elements_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
            p, static_cast<T*>(losses), static_cast<T*>(weights), bad_index);
      }
    }
  });
}

void launch_nll_loss_backward(Compute c, const void* grad_output, DType grad_dtype,
                              bool per_element, const void* target, DType target_dtype, int64_t n,
                              int64_t c_local, int64_t class_start, int64_t num_classes,
                              int64_t ignore_index, const void* weight, const void* divisor_ptr,
                              double divisor_value, void* grad_input, DType out_dtype,
                              int64_t* bad_index, cudaStream_t stream) {
  const int64_t total = n * c_local;
  if (total == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      nll_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
          grad_output, grad_dtype, per_element, target, target_dtype, n, c_local, class_start,
          num_classes, ignore_index, static_cast<const T*>(weight),
          static_cast<const T*>(divisor_ptr), static_cast<T>(divisor_value), grad_input, out_dtype,
          bad_index);
    }
  });
}

}  // namespace dtensor::kernels::cuda::detail
