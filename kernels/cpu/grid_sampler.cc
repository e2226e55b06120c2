#include "kernels/cpu/grid_sampler.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

enum Interpolation : int64_t { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum Padding : int64_t { kZeros = 0, kBorder = 1, kReflection = 2 };

// Keys' cubic convolution with A = -0.75 (ATen's bicubic, as upsample_bicubic2d):
// cc1 for |x| <= 1, cc2 for 1 < |x| < 2, and their derivatives.
constexpr double kA = -0.75;
template <typename S> S cc1(S x) { return ((S(kA) + 2) * x - (S(kA) + 3)) * x * x + 1; }
template <typename S> S cc2(S x) { return ((S(kA) * x - 5 * S(kA)) * x + 8 * S(kA)) * x - 4 * S(kA); }
template <typename S> S dcc1(S x) { return (3 * (S(kA) + 2) * x - 2 * (S(kA) + 3)) * x; }
template <typename S> S dcc2(S x) { return (3 * S(kA) * x - 10 * S(kA)) * x + 8 * S(kA); }

// The weights of the 4 taps at offsets -1, 0, 1, 2 from floor(coordinate), t its fraction, and their
// derivatives with respect to t.
template <typename S> void cubic_weights(S t, S w[4], S dw[4]) {
  w[0] = cc2(t + 1), w[1] = cc1(t), w[2] = cc1(1 - t), w[3] = cc2(2 - t);
  dw[0] = dcc2(t + 1), dw[1] = dcc1(t), dw[2] = -dcc1(1 - t), dw[3] = -dcc2(2 - t);
}

// One spatial dim of size `size`: ATen's coordinate mapping as its vectorized CPU kernel computes
// it (aten/src/ATen/native/cpu/GridSamplerKernel.cpp, ComputeLocation: the same values as
// GridSampler.h's formulas except far outside [-1, 1] and for NaN), each step with its derivative.
template <typename S>
struct Axis {
  int64_t size;
  int64_t padding;
  bool align_corners;

  S unnormalize(S g, S* d) const {
    *d = align_corners ? S(size - 1) / 2 : S(size) / 2;
    return align_corners ? (g + 1) * *d : (g + 1) * *d - S(0.5);
  }
  // clip_coordinates: into [0, size - 1], NaN to 0; the derivative is 0 where it clips (at the
  // ends too).
  S clip(S x, S* d) const {
    const S hi = S(size - 1);
    if (!(x > 0)) return *d = 0, S(0);
    if (x >= hi) return *d = 0, hi;
    return *d = 1, x;
  }
  // reflect_coordinates about low = 0 and size - 1 (align_corners) or -0.5 and size - 0.5: whole
  // double flips taken off by subtraction (0 for coordinates too large to hold a fraction), then
  // one more flip where it lands past the middle.
  S reflect(S x, S* d) const {
    if (align_corners && size <= 1) return *d = 0, S(0);
    const S low = align_corners ? S(0) : S(-0.5), twice = align_corners ? S(2 * (size - 1)) : S(2 * size);
    const S in = x - low, a = std::abs(in);
    const S extra = a - std::trunc(a / twice) * twice;
    const bool flip = extra > twice - extra;
    *d = flip != (in < 0) ? S(-1) : S(1);
    return (flip ? twice - extra : extra) + low;
  }
  // compute_coordinates: the padding mode applied to a pixel coordinate.
  S pad(S x, S* d) const {
    *d = 1;
    if (padding == kBorder) return clip(x, d);
    if (padding == kReflection) {
      S dr = 1, dc = 1;
      x = clip(reflect(x, &dr), &dc);
      *d = dr * dc;
    }
    return x;
  }
  // grid_sampler_compute_source_index: unnormalized, then padded.
  S source(S g, S* d) const {
    S du = 1, dp = 1;
    const S x = pad(unnormalize(g, &du), &dp);
    *d = du * dp;
    return x;
  }
  // A bicubic tap's index: padded on its own, then truncated (ATen's get_value_bounded); -1 when
  // it lies outside.
  int64_t bounded(int64_t i) const {
    S d;
    const S k = pad(S(i), &d);
    return k >= 0 && k < S(size) ? static_cast<int64_t>(k) : -1;
  }
};

bool inside(int64_t i, int64_t size) { return i >= 0 && i < size; }

// An integral coordinate as an index: clamped to +-2^62 (a far-off grid value is outside any
// tensor; casting it unclamped would overflow int64), NaN and infinities far outside.
template <typename S> int64_t to_index(S v) {
  const S lim = S(int64_t{1} << 62);
  return std::isfinite(v) ? static_cast<int64_t>(std::clamp(v, -lim, lim)) : -(int64_t{1} << 62);
}

// Calls tap(channel-plane offset, weight, d weight / d x, d weight / d y) for every pixel output
// (n, ho, wo) reads, in pixel units, and returns (dx/dgrid_x, dy/dgrid_y) in *gx, *gy: the one
// sampling relation the forward and backward share. A bilinear or bicubic tap outside the image
// comes with offset -1 (its value is 0): a NaN weight (a NaN or infinite grid value) still makes
// the output NaN, as ATen's weights times the zeros it gathers there.
template <typename S, typename F>
void taps(const Axis<S>& ax, const Axis<S>& ay, int64_t mode, S gxv, S gyv, S* gx, S* gy, F&& tap) {
  const int64_t w = ax.size, h = ay.size;
  if (mode == kBicubic) {
    const S x = ax.unnormalize(gxv, gx), y = ay.unnormalize(gyv, gy);
    const S x0 = std::floor(x), y0 = std::floor(y);
    S wx[4], dwx[4], wy[4], dwy[4];
    cubic_weights(x - x0, wx, dwx);
    cubic_weights(y - y0, wy, dwy);
    for (int j = 0; j < 4; ++j) {
      const int64_t iy = ay.bounded(to_index(y0) - 1 + j);
      for (int i = 0; i < 4; ++i) {
        const int64_t ix = ax.bounded(to_index(x0) - 1 + i);
        tap(ix >= 0 && iy >= 0 ? iy * w + ix : -1, wx[i] * wy[j], dwx[i] * wy[j], wx[i] * dwy[j]);
      }
    }
    return;
  }
  const S x = ax.source(gxv, gx), y = ay.source(gyv, gy);
  if (mode == kNearest) {  // ATen gathers the pixel or 0, no weight: a NaN coordinate reads 0
    const int64_t ix = to_index(std::nearbyint(x)), iy = to_index(std::nearbyint(y));
    if (inside(ix, w) && inside(iy, h)) tap(iy * w + ix, S(1), S(0), S(0));
    return;
  }
  const int64_t x0 = to_index(std::floor(x)), y0 = to_index(std::floor(y));
  const S tx = x - std::floor(x), ty = y - std::floor(y);
  // (dx, dy, weight, d/dx, d/dy) of the nw, ne, sw, se neighbours.
  const struct { int64_t dx, dy; S wt, wdx, wdy; } corner[4] = {
      {0, 0, (1 - tx) * (1 - ty), -(1 - ty), -(1 - tx)},
      {1, 0, tx * (1 - ty), 1 - ty, -tx},
      {0, 1, (1 - tx) * ty, -ty, 1 - tx},
      {1, 1, tx * ty, ty, tx}};
  for (const auto& k : corner) {
    const bool in = inside(x0 + k.dx, w) && inside(y0 + k.dy, h);
    tap(in ? (y0 + k.dy) * w + x0 + k.dx : -1, k.wt, k.wdx, k.wdy);
  }
}

// float for float32 and the 16-bit floats (ATen's opmath), double for float64.
template <typename F>
auto in_compute_type(DType dt, F&& f) {
  return dt == DType::kFloat64 ? f(double{}) : f(float{});
}

}  // namespace

void check_grid_sampler_2d(const Shape& input, DType input_dtype, const Shape& grid, DType grid_dtype,
                           int64_t interpolation_mode, int64_t padding_mode) {
  const auto shapes = [&](const char* what) {
    return absl::StrCat("grid_sampler_2d: input ", shape_str(input), ", grid ", shape_str(grid), "; ", what);
  };
  DT_CHECK(input.size() == 4 && input[2] > 0 && input[3] > 0, shapes("accepted input: [N, C, H, W] with H, W > 0"));
  DT_CHECK(grid.size() == 4 && grid[3] == 2 && grid[0] == input[0],
           shapes("accepted grid: [N, H_out, W_out, 2] with input's N"));
  DT_CHECK(is_floating(input_dtype) && input_dtype == grid_dtype, "grid_sampler_2d: input ", dtype_name(input_dtype),
           ", grid ", dtype_name(grid_dtype), "; accepted: one floating dtype for both (float32, float64, bfloat16, float16)");
  DT_CHECK(interpolation_mode >= 0 && interpolation_mode <= 2, "grid_sampler_2d: interpolation_mode ",
           interpolation_mode, "; accepted: 0 (bilinear), 1 (nearest), 2 (bicubic)");
  DT_CHECK(padding_mode >= 0 && padding_mode <= 2, "grid_sampler_2d: padding_mode ", padding_mode,
           "; accepted: 0 (zeros), 1 (border), 2 (reflection)");
}

Tensor grid_sampler_2d(const Tensor& input, const Tensor& grid, int64_t interpolation_mode, int64_t padding_mode,
                       bool align_corners) {
  DT_KERNEL_HOST_ONLY(grid_sampler_2d, input, grid, interpolation_mode, padding_mode, align_corners);
  check_grid_sampler_2d(input.sizes(), input.dtype(), grid.sizes(), grid.dtype(), interpolation_mode, padding_mode);
  return in_compute_type(input.dtype(), [&](auto zero) {
    using S = decltype(zero);
    const DType ct = DTypeOf<S>::value;
    const Tensor x = input.to(ct).contiguous(), g = grid.to(ct).contiguous();
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t ho = g.size(1), wo = g.size(2), plane = h * w, outs = ho * wo;
    Tensor out = Tensor::zeros({n, c, ho, wo}, ct);
    const S* xp = x.data<S>();
    const S* gp = g.data<S>();
    S* op = out.data<S>();
    const Axis<S> ax{w, padding_mode, align_corners}, ay{h, padding_mode, align_corners};
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < outs; ++p) {
        const S* gv = gp + (b * outs + p) * 2;
        S dx, dy;
        taps(ax, ay, interpolation_mode, gv[0], gv[1], &dx, &dy, [&](int64_t at, S wt, S, S) {
          for (int64_t ch = 0; ch < c; ++ch) op[(b * c + ch) * outs + p] += wt * (at < 0 ? S(0) : xp[(b * c + ch) * plane + at]);
        });
      }
    return out.to(input.dtype());
  });
}

std::pair<Tensor, Tensor> grid_sampler_2d_backward(const Tensor& grad_output, const Tensor& input, const Tensor& grid,
                                                   int64_t interpolation_mode, int64_t padding_mode,
                                                   bool align_corners) {
  DT_KERNEL_HOST_ONLY(grid_sampler_2d_backward, grad_output, input, grid, interpolation_mode, padding_mode,
                      align_corners);
  check_grid_sampler_2d(input.sizes(), input.dtype(), grid.sizes(), grid.dtype(), interpolation_mode, padding_mode);
  const Shape want{input.size(0), input.size(1), grid.size(1), grid.size(2)};
  DT_CHECK(grad_output.sizes() == want && grad_output.dtype() == input.dtype(), "grid_sampler_2d_backward: grad_output ",
           shape_str(grad_output.sizes()), " ", dtype_name(grad_output.dtype()), "; accepted: ", shape_str(want), " ",
           dtype_name(input.dtype()), " (the forward's output)");
  return in_compute_type(input.dtype(), [&](auto zero) {
    using S = decltype(zero);
    const DType ct = DTypeOf<S>::value;
    const Tensor go = grad_output.to(ct).contiguous(), x = input.to(ct).contiguous(), g = grid.to(ct).contiguous();
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    const int64_t outs = g.size(1) * g.size(2), plane = h * w;
    Tensor gi = Tensor::zeros(x.sizes(), ct), gg = Tensor::zeros(g.sizes(), ct);
    const S* gop = go.data<S>();
    const S* xp = x.data<S>();
    const S* gp = g.data<S>();
    S* gip = gi.data<S>();
    S* ggp = gg.data<S>();
    const Axis<S> ax{w, padding_mode, align_corners}, ay{h, padding_mode, align_corners};
    for (int64_t b = 0; b < n; ++b)
      for (int64_t p = 0; p < outs; ++p) {
        const S* gv = gp + (b * outs + p) * 2;
        S dx = 0, dy = 0, sx = 0, sy = 0;
        taps(ax, ay, interpolation_mode, gv[0], gv[1], &dx, &dy, [&](int64_t at, S wt, S wdx, S wdy) {
          if (at < 0) return;  // a zero pixel: no gradient either way
          for (int64_t ch = 0; ch < c; ++ch) {
            const S gout = gop[(b * c + ch) * outs + p];
            gip[(b * c + ch) * plane + at] += wt * gout;
            const S v = xp[(b * c + ch) * plane + at] * gout;
            sx += wdx * v;
            sy += wdy * v;
          }
        });
        ggp[(b * outs + p) * 2] = sx * dx;
        ggp[(b * outs + p) * 2 + 1] = sy * dy;
      }
    return std::pair<Tensor, Tensor>{gi.to(input.dtype()), gg.to(grid.dtype())};
  });
}

}  // namespace dtensor::kernels
