#include "dtensor/collectives/reduce.h"

#include <cmath>
#include <type_traits>

namespace dtensor {
namespace {

template <typename T>
using Acc = std::conditional_t<std::is_same_v<T, BFloat16> || std::is_same_v<T, Float16>, float, T>;

// op(a, b) for one element; Op is a template argument so that each reduction loop is branch-free
// and vectorizes (the library is built with -O3).
template <ReduceOp Op, typename T>
inline T combine(T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    return Op == ReduceOp::kMin ? (a && b) : (a || b);
  } else {
    using A = Acc<T>;
    A x = static_cast<A>(a), y = static_cast<A>(b);
    if constexpr (Op == ReduceOp::kSum || Op == ReduceOp::kAvg) {
      return T(x + y);
    } else {
      if constexpr (std::is_floating_point_v<A>) {
        if (std::isnan(x) || std::isnan(y)) return T(x + y);  // NaN wins, as in PyTorch
      }
      if constexpr (Op == ReduceOp::kMax) return T(x > y ? x : y);
      return T(x < y ? x : y);
    }
  }
}

template <ReduceOp Op, typename T>
void pair_loop(T* o, const T* a, const T* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) o[i] = combine<Op, T>(a[i], b[i]);
}

}  // namespace

void reduce_pair(void* out, const void* a, const void* b, int64_t n, DType dtype, ReduceOp op) {
  if (is_complex(dtype)) {
    // A complex sum is the sum of its parts: reduce the buffer as twice as many reals. Complex
    // numbers have no order, and a product of pairs is not a pairwise product: refused.
    DT_CHECK(op == ReduceOp::kSum || op == ReduceOp::kAvg, "reduce: ", reduce_op_name(op),
             " of ", dtype_name(dtype), " is not defined (complex numbers have no order); accepted: sum, avg");
    reduce_pair(out, a, b, 2 * n, real_of_complex(dtype), op);
    return;
  }
  DT_DISPATCH_ALL(dtype, {
    scalar_t* o = static_cast<scalar_t*>(out);
    const scalar_t* pa = static_cast<const scalar_t*>(a);
    const scalar_t* pb = static_cast<const scalar_t*>(b);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: pair_loop<ReduceOp::kSum>(o, pa, pb, n); break;
      case ReduceOp::kMax: pair_loop<ReduceOp::kMax>(o, pa, pb, n); break;
      case ReduceOp::kMin: pair_loop<ReduceOp::kMin>(o, pa, pb, n); break;
    }
  });
}

void reduce_into(void* acc, const void* x, int64_t n, DType dtype, ReduceOp op) {
  reduce_pair(acc, acc, x, n, dtype, op);
}

void finish_avg(void* acc, int64_t n, DType dtype, int count) {
  if (is_complex(dtype)) return finish_avg(acc, 2 * n, real_of_complex(dtype), count);
  DT_DISPATCH_ALL(dtype, {
    scalar_t* p = static_cast<scalar_t*>(acc);
    if constexpr (std::is_same_v<scalar_t, bool>) {
      (void)p;
    } else {
      using A = Acc<scalar_t>;
      for (int64_t i = 0; i < n; ++i) p[i] = scalar_t(static_cast<A>(p[i]) / static_cast<A>(count));
    }
  });
}

}  // namespace dtensor
