// Scalar functions of the pointwise rows (ops/pointwise/rows.h) that the C++ library lacks or that
// need torch's integer and NaN conventions, usable both on the host (g++) and in CUDA device code
// (nvcc: DT_HD). T is a compute type: float, double or int64_t (kernels/cpu/loops.h). The std::
// functions the rows call directly (std::acos, std::erf, ...) have device overloads under nvcc.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#if defined(__CUDACC__)
#define DT_HD __host__ __device__ __forceinline__
#else
#define DT_HD inline
#endif

namespace dtensor::kernels::sm {

// Rounding of integers is the identity (torch returns integer tensors unchanged); round is half to
// even (torch.round, std::nearbyint in the default rounding mode).
template <typename T>
DT_HD T ceil(T x) {
  if constexpr (std::is_integral_v<T>) return x;
  else return std::ceil(x);
}
template <typename T>
DT_HD T floor(T x) {
  if constexpr (std::is_integral_v<T>) return x;
  else return std::floor(x);
}
template <typename T>
DT_HD T trunc(T x) {
  if constexpr (std::is_integral_v<T>) return x;
  else return std::trunc(x);
}
template <typename T>
DT_HD T round(T x) {
  if constexpr (std::is_integral_v<T>) return x;
  else return std::nearbyint(x);
}
// x - trunc(x); frac(+-inf) is NaN, as torch's.
template <typename T>
DT_HD T frac(T x) {
  return x - std::trunc(x);
}
// -1, 0 or 1; torch.sign(NaN) is 0 (both comparisons are false).
template <typename T>
DT_HD T sign(T x) {
  return static_cast<T>((T(0) < x) - (x < T(0)));
}
template <typename T>
DT_HD bool isnan(T x) {
  if constexpr (std::is_integral_v<T>) return false;
  else return x != x;
}
template <typename T>
DT_HD bool isinf(T x) {
  if constexpr (std::is_integral_v<T>) return false;
  else return x == std::numeric_limits<T>::infinity() || x == -std::numeric_limits<T>::infinity();
}

// The inverse error function. Device code uses CUDA's erfinv; the host starts from Winitzki's
// closed-form approximation (relative error < 2e-3, "A handy approximation for the error function
// and its inverse", 2008) and refines it with Newton steps on erf, in double: each step squares the
// relative error, so three reach double precision. erfinv(+-1) = +-inf, |x| > 1 or NaN gives NaN.
template <typename T>
DT_HD T erfinv(T x) {
#if defined(__CUDA_ARCH__)
  return ::erfinv(x);
#else
  const double v = static_cast<double>(x);
  if (!(v >= -1.0 && v <= 1.0)) return std::numeric_limits<T>::quiet_NaN();
  if (v == 1.0 || v == -1.0) return static_cast<T>(v * std::numeric_limits<double>::infinity());
  if (v == 0.0) return static_cast<T>(v);  // keeps the sign of zero
  constexpr double kPi = 3.14159265358979323846;
  constexpr double a = 0.147;
  const double l = std::log((1.0 - v) * (1.0 + v));
  const double b = 2.0 / (kPi * a) + l / 2.0;
  double y = std::copysign(std::sqrt(std::sqrt(b * b - l / a) - b), v);
  for (int i = 0; i < 3; ++i) {
    const double slope = 2.0 / std::sqrt(kPi) * std::exp(-y * y);  // d/dy erf(y)
    if (slope == 0.0) break;  // |y| so large that erf is flat in double: y is as close as it gets
    y -= (std::erf(y) - v) / slope;
  }
  return static_cast<T>(y);
#endif
}

// Python's modulo (torch.remainder): the result has the divisor's sign. Integer division by zero is
// checked by the caller (the row's `divides` fact); here it gives 0.
template <typename T>
DT_HD T remainder(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if (b == -1) return 0;  // avoids INT64_MIN % -1
    T r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  } else {
    T r = std::fmod(a, b);
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
  }
}
// C's fmod (torch.fmod): the result has the dividend's sign.
template <typename T>
DT_HD T fmod(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0 || b == -1) return 0;
    return a % b;
  } else {
    return std::fmod(a, b);
  }
}

// Python's floor division (torch.floor_divide, div with rounding_mode="floor"): integers round
// toward -inf (a divisor of 0 is the caller's check; INT64_MIN // -1 wraps); floats go through fmod,
// so that 1.0 // 0.1 is 9, as Python's.
template <typename T>
DT_HD T div_floor(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    if (b == 0) return 0;
    if (b == -1) return static_cast<T>(0ull - static_cast<unsigned long long>(a));
    T q = a / b;
    if (a % b != 0 && ((a < 0) != (b < 0))) --q;
    return q;
  } else {
    if (b == 0) return a / b;
    const T mod = std::fmod(a, b);
    T q = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) q -= 1;
    if (q == 0) return std::copysign(T(0), a / b);
    const T f = std::floor(q);
    return q - f > T(0.5) ? f + 1 : f;
  }
}

// max and min that ignore a NaN operand (torch.fmax / fmin): NaN only when both are.
template <typename T>
DT_HD T fmax(T a, T b) {
  if constexpr (std::is_integral_v<T>) return a > b ? a : b;
  else return std::fmax(a, b);
}
template <typename T>
DT_HD T fmin(T a, T b) {
  if constexpr (std::is_integral_v<T>) return a < b ? a : b;
  else return std::fmin(a, b);
}

// log(exp(a) + exp(b)) and log2(2^a + 2^b) without overflow; equal infinities give themselves.
template <typename T>
DT_HD T logaddexp(T a, T b) {
  if (a != a || b != b) return a + b;  // NaN
  if (std::isinf(a) && a == b) return a;
  const T m = a > b ? a : b;
  return m + std::log1p(std::exp(-std::fabs(a - b)));
}
template <typename T>
DT_HD T logaddexp2(T a, T b) {
  if (a != a || b != b) return a + b;
  if (std::isinf(a) && a == b) return a;
  const T m = a > b ? a : b;
  return m + std::log1p(std::exp2(-std::fabs(a - b))) / T(0.69314718055994530942);
}

// a * log(b), 0 where a is 0 (unless b is NaN): torch.xlogy.
template <typename T>
DT_HD T xlogy(T a, T b) {
  if (b != b) return b;
  if (a == 0) return 0;
  return a * std::log(b);
}

// Step function with b at 0 (torch.heaviside); a NaN a gives 0, as torch's.
template <typename T>
DT_HD T heaviside(T a, T b) {
  return a == 0 ? b : static_cast<T>(a > 0);
}

// Greatest common divisor and least common multiple of integers, non-negative (gcd(0, 0) = 0).
template <typename T>
DT_HD T gcd(T a, T b) {
  a = a < 0 ? -a : a;
  b = b < 0 ? -b : b;
  while (b != 0) {
    const T r = a % b;
    a = b;
    b = r;
  }
  return a;
}
template <typename T>
DT_HD T lcm(T a, T b) {
  const T g = gcd(a, b);
  if (g == 0) return 0;
  const T l = a / g * b;
  return l < 0 ? -l : l;
}

// Shifts of integers as torch's: a shift outside [0, 64) gives 0 (left) or the sign (right).
template <typename T>
DT_HD T shift_left(T a, T b) {
  if (b < 0 || b >= 64) return 0;
  return static_cast<T>(static_cast<unsigned long long>(a) << b);
}
template <typename T>
DT_HD T shift_right(T a, T b) {
  if (b < 0 || b >= 64) return a < 0 ? T(-1) : T(0);
  return a >> b;
}

template <typename T>
DT_HD bool signbit(T x) {
  if constexpr (std::is_integral_v<T>) return x < 0;
  else return std::signbit(x);
}

// torch.clamp(x, lo, hi) = min(max(x, lo), hi) with optional bounds: a NaN bound is None (the rows
// pass None as NaN and refuse an explicit NaN). A NaN x stays NaN; lo > hi gives hi, as torch's.
template <typename T>
DT_HD T clamp_opt(T x, double lo, double hi) {
  if (isnan(x)) return x;
  if (lo == lo && x < static_cast<T>(lo)) x = static_cast<T>(lo);
  if (hi == hi && x > static_cast<T>(hi)) x = static_cast<T>(hi);
  return x;
}

}  // namespace dtensor::kernels::sm
