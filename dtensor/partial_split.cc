#include "dtensor/partial_split.h"

#include <algorithm>
#include <cmath>

#include "dtensor/dtensor_spec.h"

namespace dtensor {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
double unit(uint64_t h) { return static_cast<double>(h >> 11) / 9007199254740992.0; }
// Values sit on a grid fine enough to be interesting and coarse enough that every Partial part of a
// 16-bit float is exact in it (parts grow to ~30 in magnitude on 8 ranks).
double grid(DType dt) { return dt == DType::kBFloat16 || dt == DType::kFloat16 ? 4.0 : 64.0; }

// A max (min) part below (above) the value, kept within the narrow integers' range: uint8's 0 less
// 1 would wrap to 255, above the value; at the range's end the part equals the value (a tie).
double within_range(DType dt, double v) {
  switch (dt) {
    case DType::kUInt8: return std::clamp(v, 0.0, 255.0);
    case DType::kInt8: return std::clamp(v, -128.0, 127.0);
    case DType::kInt16: return std::clamp(v, -32768.0, 32767.0);
    default: return v;
  }
}

}  // namespace

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed) {
  if (is_complex(dtype)) {  // independent real and imaginary parts, each as for the part's dtype
    const DType part = real_of_complex(dtype);
    auto re = random_tensor(shape, part, seed).to_vector<double>();
    auto im = random_tensor(shape, part, seed ^ 0x9e3779b97f4a7c15ull).to_vector<double>();
    Tensor c = Tensor::empty(shape, DType::kComplex128);
    auto* p = c.data<std::complex<double>>();
    for (size_t i = 0; i < re.size(); ++i) p[i] = {re[i], im[i]};
    return c.to(dtype);
  }
  Tensor t = Tensor::empty(shape, DType::kFloat64);
  double* p = t.data<double>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    double u = unit(mix(seed ^ mix(static_cast<uint64_t>(i))));
    if (dtype == DType::kBool) p[i] = u < 0.5 ? 0.0 : 1.0;
    else if (!is_floating(dtype)) p[i] = std::floor(u * 11.0) - 5.0;
    else p[i] = std::round((u * 4.0 - 2.0) * grid(dtype)) / grid(dtype);
  }
  return t.to(dtype);
}

Tensor adversarial_local_block(const Tensor& global, const Placements& placements,
                               const Shape& mesh_shape, const std::vector<int64_t>& coord,
                               uint64_t seed) {
  auto [shape, offset] = local_block(global.sizes(), placements, mesh_shape, coord);
  Tensor v = global;
  for (size_t d = 0; d < shape.size(); ++d) v = v.narrow(static_cast<int64_t>(d), offset[d], shape[d]);
  bool has_partial = false;
  for (const auto& p : placements) has_partial |= p.is_partial();
  if (!has_partial) return v.contiguous();
  const DType dt = global.dtype();
  if (is_complex(dt)) {
    // A complex sum is the sum of the parts: the real and imaginary parts split independently (the
    // collectives refuse max/min of complex, so only sum and avg reach here).
    const DType part = real_of_complex(dt);
    Tensor c = global.to(DType::kComplex128).contiguous();
    Tensor re = Tensor::empty(global.sizes(), DType::kFloat64), im = Tensor::empty(global.sizes(), DType::kFloat64);
    const auto* src = c.data<std::complex<double>>();
    for (int64_t i = 0; i < c.numel(); ++i) {
      re.data<double>()[i] = src[i].real();
      im.data<double>()[i] = src[i].imag();
    }
    auto r = adversarial_local_block(re.to(part), placements, mesh_shape, coord, seed).to_vector<double>();
    auto m = adversarial_local_block(im.to(part), placements, mesh_shape, coord, seed ^ 0x9e3779b97f4a7c15ull)
                 .to_vector<double>();
    Tensor out = Tensor::empty(shape, DType::kComplex128);
    auto* o = out.data<std::complex<double>>();
    for (size_t i = 0; i < r.size(); ++i) o[i] = {r[i], m[i]};
    return out.to(dt);
  }
  const bool floating = is_floating(dt), boolean = dt == DType::kBool;
  Tensor w = v.to(DType::kFloat64).clone();
  double* p = w.data<double>();
  // Global flat index of each local element: the split of an element is the same on every rank.
  Shape gstr = contiguous_strides(global.sizes());
  std::vector<uint64_t> gidx(w.numel());
  for (int64_t e = 0; e < w.numel(); ++e) {
    int64_t rem = e, g = 0;
    for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
      g += (rem % shape[d] + offset[d]) * gstr[d];
      rem /= shape[d];
    }
    gidx[e] = static_cast<uint64_t>(g);
  }
  for (size_t i = 0; i < mesh_shape.size(); ++i) {
    if (!placements[i].is_partial()) continue;
    const int64_t k = mesh_shape[i], me = coord[i];
    const ReduceOp op = placements[i].reduce;
    for (int64_t e = 0; e < w.numel(); ++e) {
      auto u = [&](int64_t j) {  // a part in [-3, 3): floats on the grid, integers whole
        double x = unit(mix(seed ^ mix(gidx[e] * 131 + i * 17 + static_cast<uint64_t>(j)))) * 6.0 - 3.0;
        return floating ? std::round(x * grid(dt)) / grid(dt) : std::floor(x);
      };
      const int64_t star = static_cast<int64_t>(mix(seed + gidx[e] + i) % static_cast<uint64_t>(k));
      double val = p[e];
      if (boolean) {
        // or / and semantics: max = any, min = all; sum/avg keep the value on coordinate 0 only.
        if (op == ReduceOp::kMax) val = me == star ? val : 0.0;
        else if (op == ReduceOp::kMin) val = me == star ? val : 1.0;
        else val = me == 0 ? val : 0.0;
      } else if (op == ReduceOp::kSum || (op == ReduceOp::kAvg && floating)) {
        double scale = op == ReduceOp::kAvg ? static_cast<double>(k) : 1.0;
        if (me < k - 1) {
          val = u(me);
        } else {
          val *= scale;
          for (int64_t j = 0; j < k - 1; ++j) val -= u(j);
        }
      } else if (op == ReduceOp::kMax) {
        val = me == star ? val : within_range(dt, val - std::abs(u(me)) - (floating ? 0.0 : 1.0));
      } else if (op == ReduceOp::kMin) {
        val = me == star ? val : within_range(dt, val + std::abs(u(me)) + (floating ? 0.0 : 1.0));
      }  // integer avg: every rank keeps the value
      p[e] = val;
    }
  }
  return w.to(dt);
}

}  // namespace dtensor
