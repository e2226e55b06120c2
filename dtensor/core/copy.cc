// Strided copy with dtype cast: the one routine behind copy_, contiguous, to and fill_.
#include <cstring>
#include <type_traits>

#include "dtensor/core/tensor.h"

namespace dtensor {
namespace {

template <typename T> struct IsComplex : std::false_type {};
template <typename T> struct IsComplex<std::complex<T>> : std::true_type {};

template <typename D, typename S>
inline D convert(S v) {
  if constexpr (std::is_same_v<D, S>) {
    return v;
  } else if constexpr (IsComplex<S>::value) {
    // complex to complex keeps both parts; to a real or bool type, torch's copy_ keeps the real part
    // (bool: nonzero when either part is).
    if constexpr (IsComplex<D>::value) {
      return D(static_cast<typename D::value_type>(v.real()), static_cast<typename D::value_type>(v.imag()));
    } else if constexpr (std::is_same_v<D, bool>) {
      return v.real() != 0 || v.imag() != 0;
    } else {
      return convert<D>(v.real());
    }
  } else if constexpr (IsComplex<D>::value) {  // real to complex: imaginary part 0
    return D(convert<typename D::value_type>(v), typename D::value_type(0));
  } else if constexpr (std::is_same_v<D, bool>) {
    if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<S, Float16>) {
      return static_cast<float>(v) != 0.0f;
    } else {
      return v != S(0);
    }
  } else if constexpr (std::is_same_v<S, BFloat16> || std::is_same_v<S, Float16>) {
    return convert<D>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<D, BFloat16> || std::is_same_v<D, Float16>) {
    return D(static_cast<float>(v));
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> && sizeof(D) < 4) {
    // A float to uint8/int8/int16 through int64, wrapping: -3.0 is 253 as uint8, as torch gives on
    // x86 (a direct cast of an out-of-range float to a narrow type is undefined behaviour).
    return static_cast<D>(static_cast<int64_t>(v));
  } else {
    return static_cast<D>(v);
  }
}

struct Dim {
  int64_t size, dst_stride, src_stride;
};

template <typename D, typename S>
void copy_loop(char* dst, const char* src, const absl::InlinedVector<Dim, 6>& dims) {
  const int nd = static_cast<int>(dims.size());
  const Dim& in = dims[nd - 1];
  absl::InlinedVector<int64_t, 6> idx(nd, 0);
  int64_t outer = 1;
  for (int i = 0; i < nd - 1; ++i) outer *= dims[i].size;
  D* d = reinterpret_cast<D*>(dst);
  const S* s = reinterpret_cast<const S*>(src);
  for (int64_t o = 0; o < outer; ++o) {
    if (in.dst_stride == 1 && in.src_stride == 1) {
      if constexpr (std::is_same_v<D, S>) {
        std::memcpy(d, s, sizeof(D) * in.size);
      } else {
        for (int64_t i = 0; i < in.size; ++i) d[i] = convert<D>(s[i]);
      }
    } else {
      for (int64_t i = 0; i < in.size; ++i) d[i * in.dst_stride] = convert<D>(s[i * in.src_stride]);
    }
    // Advance the outer index (odometer), moving the pointers by strides.
    for (int k = nd - 2; k >= 0; --k) {
      d += dims[k].dst_stride;
      s += dims[k].src_stride;
      if (++idx[k] < dims[k].size) break;
      d -= dims[k].dst_stride * dims[k].size;
      s -= dims[k].src_stride * dims[k].size;
      idx[k] = 0;
    }
  }
}

}  // namespace

void copy_strided(void* dst, const Shape& dst_strides, DType dst_dtype, const void* src,
                  const Shape& src_strides, DType src_dtype, const Shape& sizes) {
  absl::InlinedVector<Dim, 6> dims;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 0) return;
    if (sizes[i] == 1) continue;
    dims.push_back({sizes[i], dst_strides[i], src_strides[i]});
  }
  // Merge an outer dim into its inner neighbour when both sides are contiguous across them.
  absl::InlinedVector<Dim, 6> merged;
  for (const Dim& dm : dims) {
    if (!merged.empty()) {
      Dim& prev = merged.back();
      if (prev.dst_stride == dm.dst_stride * dm.size && prev.src_stride == dm.src_stride * dm.size) {
        prev = {prev.size * dm.size, dm.dst_stride, dm.src_stride};
        continue;
      }
    }
    merged.push_back(dm);
  }
  if (merged.empty()) merged.push_back({1, 1, 1});
  DT_DISPATCH_ALL_AND_COMPLEX(dst_dtype, {
    using D = scalar_t;
    DT_DISPATCH_ALL_AND_COMPLEX(src_dtype, {
      copy_loop<D, scalar_t>(static_cast<char*>(dst), static_cast<const char*>(src), merged);
    });
  });
}

}  // namespace dtensor
