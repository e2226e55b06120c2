// Packed keys for CUDA cummax / cummin (scan_kernels.cu), in plain C++ so host tests can check the
// encoding against the CPU kernel (tests/cuda/scan_key_test.cc) without a GPU.
//
// cummax / cummin along the rows of a contiguous [rows, n] tensor become ONE inclusive max-scan of
// unsigned keys over the flat elements, key = row | code(value) | position (most significant
// first):
// - code orders values so that the larger key is the element the CPU rule (kernels/cpu/scan.h)
//   keeps: for cummax, larger values have larger codes; for cummin, smaller values do (the bits
//   flipped); every NaN has the one largest code (all ones), above +-inf.
// - -0.0 and +0.0 have the same code (they compare equal, so the rule takes the later one).
// - Equal codes fall to the position: the later element wins, as the rule's >= / <= says, and a
//   later NaN takes over from an earlier one (its index is kept, the value stays NaN).
// - The row in the top bits makes a flat max-scan a scan per row: every key of row r is above every
//   key of the rows before it, and the first element of a row starts afresh.
// A max-scan is associative and has no data-dependent branch, so CUB's tuned single-pass scan
// (cuda::maximum on an integer) runs it. The value comes back from the code exactly, except that
// NaN (payload and sign) and zero (sign) are read again from the input at the kept index
// (needs_reload), so the values equal the CPU kernel's bit for bit.
//
// Widths: the code has T's width (32 bits for float, 64 for double and int64); row and position
// take bit_width(rows - 1) and bit_width(n - 1) bits. Key is uint64_t when they fit in 64 bits
// (float with rows * n < 2^31 always does), else unsigned __int128 (everything fits in 128 bits:
// rows * n < 2^63 leaves row + position at most 64 bits).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__CUDACC__)
#define DT_SCAN_KEY_FN __host__ __device__ __forceinline__
#else
#define DT_SCAN_KEY_FN inline
#endif

namespace dtensor::kernels::cuda::scan_key {

using u128 = unsigned __int128;

// The unsigned integer of T's width.
template <typename T>
using Code = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;

template <typename T>
constexpr int kCodeBits = static_cast<int>(8 * sizeof(T));

// Bits to hold 0 .. count - 1 (0 for count <= 1).
DT_SCAN_KEY_FN int bits_for(uint64_t count) {
  int b = 0;
  while (b < 64 && count > 1 && (count - 1) >> b != 0) ++b;
  return b;
}

template <typename T>
DT_SCAN_KEY_FN Code<T> to_bits(T v) {
  Code<T> b;
  memcpy(&b, &v, sizeof b);
  return b;
}

template <typename T>
DT_SCAN_KEY_FN T from_bits(Code<T> b) {
  T v;
  memcpy(&v, &b, sizeof v);
  return v;
}

// The code of v (see the top comment); T is float, double or int64_t. Selects, no branches: the
// scan kernel loads several elements a thread, and a branch on a loaded value would make each load
// wait for the one before.
template <typename T>
DT_SCAN_KEY_FN Code<T> code_of(T v, bool is_max) {
  using U = Code<T>;
  constexpr U kSign = U(1) << (kCodeBits<T> - 1);
  if constexpr (std::is_floating_point_v<T>) {
    U b = to_bits(v);
    b = b == kSign ? U(0) : b;  // -0.0 as +0.0
    const U ordered = (b & kSign) ? ~b : (b | kSign);
    const U code = is_max ? ordered : ~ordered;
    return v != v ? ~U(0) : code;  // NaN: above every value, for cummax and cummin alike
  } else {
    const U ordered = static_cast<U>(v) ^ kSign;
    return is_max ? ordered : ~ordered;
  }
}

// The value of a code (code_of's inverse): exact for integers and for floats that are neither NaN
// nor zero; for those it gives NaN / +0.0 and needs_reload says so.
template <typename T>
DT_SCAN_KEY_FN T value_of(Code<T> code, bool is_max) {
  using U = Code<T>;
  constexpr U kSign = U(1) << (kCodeBits<T> - 1);
  if constexpr (std::is_floating_point_v<T>) {
    if (code == ~U(0)) return from_bits<T>(~U(0));  // a NaN
    const U ordered = is_max ? code : ~code;
    return from_bits<T>((ordered & kSign) ? (ordered & ~kSign) : ~ordered);
  } else {
    const U ordered = is_max ? code : ~code;
    return static_cast<T>(ordered ^ kSign);
  }
}

// Whether value_of(code) may differ from the element's bits (NaN payload and sign, zero's sign):
// the value is then read from the input at the key's position.
template <typename T>
DT_SCAN_KEY_FN bool needs_reload(Code<T> code, bool is_max) {
  if constexpr (std::is_floating_point_v<T>) {
    using U = Code<T>;
    constexpr U kSign = U(1) << (kCodeBits<T> - 1);
    return code == ~U(0) || code == (is_max ? kSign : ~kSign);
  } else {
    return false;
  }
}

// Whether uint64_t keys hold row, code and position of a [rows, n] tensor of T, with the row's
// shift (code and position bits) below 64: a shift by the key's full width is undefined, even of
// a row field of 0 bits.
template <typename T>
inline bool fits_64(int64_t rows, int64_t n) {
  const int low = kCodeBits<T> + bits_for(static_cast<uint64_t>(n));
  return low < 64 && low + bits_for(static_cast<uint64_t>(rows)) <= 64;
}

// Packs and unpacks keys of T values in Key (uint64_t or u128) for rows of n elements.
template <typename T, typename Key>
struct Layout {
  int pos_bits = 0;  // bits_for(n)

  Layout() = default;
  explicit Layout(int64_t n) : pos_bits(bits_for(static_cast<uint64_t>(n))) {}

  DT_SCAN_KEY_FN Key pack(uint64_t row, Code<T> code, uint64_t pos) const {
    return (Key(row) << (kCodeBits<T> + pos_bits)) | (Key(code) << pos_bits) | Key(pos);
  }
  DT_SCAN_KEY_FN uint64_t pos(Key k) const {
    return static_cast<uint64_t>(k) & ((uint64_t{1} << pos_bits) - 1);
  }
  DT_SCAN_KEY_FN Code<T> code(Key k) const { return static_cast<Code<T>>(k >> pos_bits); }
  DT_SCAN_KEY_FN uint64_t row(Key k) const {
    return static_cast<uint64_t>(k >> (kCodeBits<T> + pos_bits));
  }
};

}  // namespace dtensor::kernels::cuda::scan_key
