#include "kernels/cpu/conv.h"

#include <algorithm>

#include "dtensor/core/error.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// A convolution's sizes with its spatial dims padded to 3 (size 1, kernel 1, stride 1, no padding):
// one loop nest serves 1-, 2- and 3-d.
struct Geometry {
  int64_t n, c, o, g, cg, og;           // batch, in/out channels, groups, channels per group
  std::array<int64_t, 3> in, k, out, s, p, d;
};

Geometry geometry(const Shape& x, const Shape& w, const ConvParams& p) {
  const size_t sd = x.size() < 3 ? 0 : x.size() - 2;
  DT_CHECK(x.size() >= 3 && x.size() <= 5 && w.size() == x.size(), "convolution: input ", shape_str(x),
           " and weight ", shape_str(w), "; accepted: input [N, C, *spatial] with 1 to 3 spatial dims and weight "
           "[O, C / groups, *kernel] of the same rank");
  DT_CHECK(p.stride.size() == sd && p.padding.size() == sd && p.dilation.size() == sd, "convolution: stride, ",
           "padding and dilation need ", sd, " values each");
  Geometry g;
  g.n = x[0], g.c = x[1], g.o = w[0], g.g = p.groups;
  DT_CHECK(g.g >= 1 && g.c % g.g == 0 && g.o % g.g == 0 && w[1] == g.c / g.g, "convolution: input has ", g.c,
           " channels, weight ", shape_str(w), " with groups ", g.g, "; accepted: C and O divisible by groups, "
           "weight dim 1 = C / groups");
  g.cg = g.c / g.g, g.og = g.o / g.g;
  for (size_t i = 0; i < 3; ++i) {
    const bool real = i < sd;
    g.in[i] = real ? x[2 + i] : 1;
    g.k[i] = real ? w[2 + i] : 1;
    g.s[i] = real ? p.stride[i] : 1;
    g.p[i] = real ? p.padding[i] : 0;
    g.d[i] = real ? p.dilation[i] : 1;
    DT_CHECK(g.s[i] >= 1 && g.d[i] >= 1 && g.p[i] >= 0, "convolution: stride and dilation must be >= 1 and padding "
             ">= 0");
    g.out[i] = conv_out_size(g.in[i], g.k[i], g.s[i], g.p[i], g.d[i]);
    DT_CHECK(g.out[i] >= 1, "convolution: the kernel ", shape_str(w), " (dilated) does not fit the padded input ",
             shape_str(x));
  }
  return g;
}

Shape out_shape(const Geometry& g, size_t sd) {
  Shape s{g.n, g.o};
  for (size_t i = 0; i < sd; ++i) s.push_back(g.out[i]);
  return s;
}

// Calls f(output offset, input offset, weight offset) for every (output position, kernel tap) pair
// whose input position lies inside the unpadded input, for one (n, output channel o, input channel
// c of o's group): the one index relation the forward and both gradients share.
template <typename F>
void taps(const Geometry& g, int64_t n, int64_t o, int64_t c, F&& f) {
  const int64_t in_sp = g.in[0] * g.in[1] * g.in[2], out_sp = g.out[0] * g.out[1] * g.out[2];
  const int64_t k_sp = g.k[0] * g.k[1] * g.k[2];
  const int64_t grp = o / g.og;
  const int64_t x_base = (n * g.c + grp * g.cg + c) * in_sp;
  const int64_t w_base = (o * g.cg + c) * k_sp;
  const int64_t y_base = (n * g.o + o) * out_sp;
  for (int64_t o0 = 0; o0 < g.out[0]; ++o0)
    for (int64_t o1 = 0; o1 < g.out[1]; ++o1)
      for (int64_t o2 = 0; o2 < g.out[2]; ++o2) {
        const int64_t y = y_base + (o0 * g.out[1] + o1) * g.out[2] + o2;
        for (int64_t k0 = 0; k0 < g.k[0]; ++k0) {
          const int64_t i0 = o0 * g.s[0] - g.p[0] + k0 * g.d[0];
          if (i0 < 0 || i0 >= g.in[0]) continue;
          for (int64_t k1 = 0; k1 < g.k[1]; ++k1) {
            const int64_t i1 = o1 * g.s[1] - g.p[1] + k1 * g.d[1];
            if (i1 < 0 || i1 >= g.in[1]) continue;
            for (int64_t k2 = 0; k2 < g.k[2]; ++k2) {
              const int64_t i2 = o2 * g.s[2] - g.p[2] + k2 * g.d[2];
              if (i2 < 0 || i2 >= g.in[2]) continue;
              f(y, x_base + (i0 * g.in[1] + i1) * g.in[2] + i2, w_base + (k0 * g.k[1] + k1) * g.k[2] + k2);
            }
          }
        }
      }
}

// taps() over every (image, output channel, input channel of its group).
template <typename F>
void every_tap(const Geometry& g, F&& f) {
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t o = 0; o < g.o; ++o)
      for (int64_t c = 0; c < g.cg; ++c) taps(g, n, o, c, f);
}

Tensor as_double(const Tensor& t) { return t.to(DType::kFloat64).contiguous(); }

void check_floating(const Tensor& t, const char* what) {
  DT_CHECK(is_floating(t.dtype()), "convolution: ", what, " is ", dtype_name(t.dtype()),
           "; accepted: float32, float64, float16, bfloat16");
}

}  // namespace

int64_t conv_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  return (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1;
}

Shape conv_output_shape(const Shape& x, const Shape& w, const ConvParams& p) {
  return out_shape(geometry(x, w, p), x.size() - 2);
}

Tensor convolution(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvParams& p) {
  DT_KERNEL_HOST_ONLY(convolution, x, w, bias, p);
  check_floating(x, "input");
  const Geometry g = geometry(x.sizes(), w.sizes(), p);
  DT_CHECK(!bias.defined() || bias.sizes() == Shape{g.o}, "convolution: bias ", shape_str(bias.sizes()),
           "; accepted: [", g.o, "]");
  const Tensor xd = as_double(x), wd = as_double(w);
  Tensor y = Tensor::zeros(out_shape(g, x.dim() - 2), DType::kFloat64);
  const double* xp = xd.data<double>();
  const double* wp = wd.data<double>();
  double* yp = y.data<double>();
  const int64_t out_sp = g.out[0] * g.out[1] * g.out[2];
  if (bias.defined()) {  // each output starts at its bias, then adds its taps in channel order
    const Tensor bd = as_double(bias);
    const double* bp = bd.data<double>();
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t o = 0; o < g.o; ++o) std::fill_n(yp + (n * g.o + o) * out_sp, out_sp, bp[o]);
  }
  every_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { yp[yi] += xp[xi] * wp[wi]; });
  return y.to(x.dtype());
}

std::vector<Tensor> convolution_backward(const Tensor& grad, const Tensor& x, const Tensor& w,
                                           const ConvParams& p, std::array<bool, 3> mask) {
  DT_KERNEL_HOST_ONLY(convolution_backward, grad, x, w, p, mask);
  check_floating(x, "input");
  const Geometry g = geometry(x.sizes(), w.sizes(), p);
  DT_CHECK(grad.sizes() == out_shape(g, x.dim() - 2), "convolution_backward: grad_output ", shape_str(grad.sizes()),
           "; the convolution's output is ", shape_str(out_shape(g, x.dim() - 2)));
  const Tensor gd = as_double(grad), xd = as_double(x), wd = as_double(w);
  const double* gp = gd.data<double>();
  const double* xp = xd.data<double>();
  const double* wp = wd.data<double>();
  std::vector<Tensor> out(3);
  if (mask[0]) {
    Tensor gi = Tensor::zeros(x.sizes(), DType::kFloat64);
    double* p_in = gi.data<double>();
    every_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { p_in[xi] += gp[yi] * wp[wi]; });
    out[0] = gi.to(x.dtype());
  }
  if (mask[1]) {
    Tensor gw = Tensor::zeros(w.sizes(), DType::kFloat64);
    double* p_w = gw.data<double>();
    every_tap(g, [&](int64_t yi, int64_t xi, int64_t wi) { p_w[wi] += gp[yi] * xp[xi]; });
    out[1] = gw.to(w.dtype());
  }
  if (mask[2]) {
    Tensor gb = Tensor::zeros({g.o}, DType::kFloat64);
    double* p_b = gb.data<double>();
    const int64_t out_sp = g.out[0] * g.out[1] * g.out[2];
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t o = 0; o < g.o; ++o)
        for (int64_t i = 0; i < out_sp; ++i) p_b[o] += gp[(n * g.o + o) * out_sp + i];
    out[2] = gb.to(grad.dtype());
  }
  return out;
}

}  // namespace dtensor::kernels
