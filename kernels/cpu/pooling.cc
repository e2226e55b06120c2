#include "kernels/cpu/pooling.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

namespace dtensor::kernels {
namespace {

// One spatial dim of a pooling problem, in global coordinates. Dims below the op's rank are
// trivial (size 1, kernel 1), so every op runs as a 3-d one.
struct Axis {
  int64_t k = 1, s = 1, p = 0, d = 1;           // kernel, stride, padding, dilation
  int64_t in = 1, in_start = 0, in_local = 1;   // global size; the local rows' global start, count
  int64_t out = 1, out_start = 0, out_end = 1;  // global output size; the produced rows
};

struct Geometry {
  const char* op;
  int dims;
  Shape lead;  // [N, C] or [C]
  std::array<Axis, 3> ax;
  Axis& axis(int k) { return ax[3 - dims + k]; }
};

void check_floating(const char* op, const Tensor& t, const char* what) {
  DT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", dtype_name(t.dtype()),
           " ", shape_str(t.sizes()), " (accepted: float32, float64, bfloat16, float16)");
}

// A per-spatial-dim list: one value broadcasts; empty gives `dflt`.
std::vector<int64_t> expand(const char* op, const char* what, const std::vector<int64_t>& v,
                            int dims, const std::vector<int64_t>& dflt) {
  if (v.empty()) return dflt;
  if (v.size() == 1) return std::vector<int64_t>(dims, v[0]);
  DT_CHECK(static_cast<int>(v.size()) == dims, op, ": ", what, " has ", v.size(), " entries for ",
           dims, " spatial dims (accepted: 1 or ", dims, " entries)");
  return v;
}

int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

// Checks one dim's parameters and returns torch's output size (not checked for >= 1).
int64_t output_size(const char* op, int64_t in, int64_t k, int64_t s, int64_t p, int64_t d,
                    bool ceil_mode, bool pool3d) {
  DT_CHECK(k > 0 && s > 0 && d > 0, op, ": kernel_size (", k, "), stride (", s, ") and dilation (",
           d, ") must be > 0");
  const int64_t limit = pool3d ? k / 2 : ((k - 1) * d + 1) / 2;
  DT_CHECK(p >= 0 && p <= limit, op, ": padding ", p, " must be >= 0 and at most half of the ",
           pool3d ? "kernel size " : "effective kernel size ", pool3d ? k : (k - 1) * d + 1,
           " (accepted: 0 .. ", limit, ")");
  int64_t out = floor_div(in + 2 * p - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0), s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;  // the last window must not start in the padding
  return out;
}

// The input's lead dims and spatial axes with the slabs' global coordinates applied.
Geometry input_geometry(const char* op, const Shape& s, int dims,
                        const std::vector<PoolSlab>& slabs) {
  DT_CHECK(dims >= 1 && dims <= 3, op, ": dims = ", dims, " (accepted: 1, 2 or 3 spatial dims)");
  const int rank = static_cast<int>(s.size());
  DT_CHECK(rank == dims + 1 || rank == dims + 2, op,
           ": expected a [N, C, *spatial] or [C, *spatial]", " input with ", dims,
           " spatial dims, got ", shape_str(s));
  Geometry g{op, dims, Shape(s.begin(), s.end() - dims), {}};
  for (int k = 0; k < dims; ++k) g.axis(k).in = g.axis(k).in_local = s[rank - dims + k];
  std::vector<bool> seen(dims, false);
  for (const PoolSlab& sl : slabs) {
    DT_CHECK(sl.dim >= 0 && sl.dim < dims && !seen[sl.dim], op, ": slab dim ", sl.dim,
             " must be a distinct spatial dim in 0 .. ", dims - 1);
    seen[sl.dim] = true;
    Axis& a = g.axis(sl.dim);
    a.in = sl.input_size;
    a.in_start = sl.input_start;
    DT_CHECK(a.in_start >= 0 && a.in_start + a.in_local <= a.in, op, ": the slab of spatial dim ",
             sl.dim, " holds rows [", a.in_start, ", ", a.in_start + a.in_local,
             ") outside the global input size ", a.in);
  }
  bool nonzero = g.lead.back() > 0;
  for (int k = 0; k < dims; ++k) nonzero = nonzero && g.axis(k).in > 0;
  DT_CHECK(nonzero, op, ": expected non-zero channel and spatial sizes (N may be 0), got ",
           shape_str(s));
  return g;
}

// Sets the produced output rows: all of them, or the slabs' ranges.
void set_outputs(Geometry& g, const std::vector<PoolSlab>& slabs) {
  for (Axis& a : g.ax) a.out_start = 0, a.out_end = a.out;
  for (const PoolSlab& sl : slabs) {
    Axis& a = g.axis(sl.dim);
    DT_CHECK(sl.output_size < 0 || sl.output_size == a.out, g.op, ": slab of spatial dim ", sl.dim,
             " says output_size ", sl.output_size, " but the global output size is ", a.out);
    DT_CHECK(0 <= sl.output_start && sl.output_start <= sl.output_end && sl.output_end <= a.out,
             g.op, ": slab output rows [", sl.output_start, ", ", sl.output_end,
             ") of spatial dim ", sl.dim, " (accepted: within [0, ", a.out, "))");
    a.out_start = sl.output_start;
    a.out_end = sl.output_end;
  }
}

Geometry pool_geometry(const char* op, const Shape& s, int dims, bool is_max,
                       const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                       const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation,
                       bool ceil_mode, const std::vector<PoolSlab>& slabs) {
  Geometry g = input_geometry(op, s, dims, slabs);
  DT_CHECK(!kernel_size.empty(), op, ": kernel_size is empty (accepted: 1 or ", dims, " entries)");
  const std::vector<int64_t> k = expand(op, "kernel_size", kernel_size, dims, {});
  const std::vector<int64_t> st = expand(op, "stride", stride, dims, k);
  const std::vector<int64_t> p =
      expand(op, "padding", padding, dims, std::vector<int64_t>(dims, 0));
  const std::vector<int64_t> d =
      expand(op, "dilation", dilation, dims, std::vector<int64_t>(dims, 1));
  for (int i = 0; i < dims; ++i) {
    Axis& a = g.axis(i);
    a.k = k[i], a.s = st[i], a.p = p[i], a.d = d[i];
    a.out = output_size(op, a.in, a.k, a.s, a.p, a.d, ceil_mode, dims == 3);
    DT_CHECK(a.out >= 1, op, ": spatial dim ", i, " of size ", a.in, " gives output size ", a.out,
             " (kernel ", a.k, ", stride ", a.s, ", padding ", a.p, ", dilation ", a.d,
             "): output size is too small");
    DT_CHECK(is_max || dims != 3 || a.in >= a.k, op, ": spatial dim ", i, " of size ", a.in,
             " is smaller than the kernel size ", a.k, " (avg_pool 3-d needs input >= kernel)");
  }
  set_outputs(g, slabs);
  return g;
}

// The window of global output row o along an axis: its in-input positions, its length clipped at
// the end of the right padding (avg's count_include_pad count), and its first non-negative
// position (max pooling's initial index).
struct Window {
  std::vector<int64_t> pos;
  int64_t span = 0, first = 0;
};

Window pool_window(const Axis& a, int64_t o) {
  Window w;
  const int64_t st = o * a.s - a.p;
  for (int64_t j = 0; j < a.k; ++j)
    if (st + j * a.d >= 0 && st + j * a.d < a.in) w.pos.push_back(st + j * a.d);
  w.span = std::min(st + (a.k - 1) * a.d + 1, a.in + a.p) - st;
  for (w.first = st; w.first < 0;) w.first += a.d;
  return w;
}

Window adaptive_window(const Axis& a, int64_t o) {
  Window w;
  const int64_t lo = o * a.in / a.out, hi = ((o + 1) * a.in + a.out - 1) / a.out;
  for (int64_t q = lo; q < hi; ++q) w.pos.push_back(q);
  w.span = hi - lo;
  w.first = lo;
  return w;
}

// Every produced output element's taps (in-input window positions) as local offsets in the
// input plane and global flat spatial indices, in row-major window order.
struct Plan {
  Shape out_shape;
  int64_t in_plane = 1, out_plane = 1;
  std::vector<int64_t> begin{0}, local, global;  // taps of element e: [begin[e], begin[e + 1])
  std::vector<int64_t> span, first;              // per element: product of spans; first index
  int64_t taps(int64_t e) const { return begin[e + 1] - begin[e]; }
};

Plan make_plan(const Geometry& g, bool adaptive) {
  std::array<std::vector<Window>, 3> w;
  for (int i = 0; i < 3; ++i) {
    const Axis& a = g.ax[i];
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
    for (int64_t o = a.out_start; o < a.out_end; ++o) {
      w[i].push_back(adaptive ? adaptive_window(a, o) : pool_window(a, o));
      for (int64_t q : w[i].back().pos) lo = std::min(lo, q), hi = std::max(hi, q + 1);
    }
    DT_CHECK(lo >= hi || (lo >= a.in_start && hi <= a.in_start + a.in_local), g.op,
             ": output rows [", a.out_start, ", ", a.out_end, ") of spatial dim ", i - (3 - g.dims),
             " read input rows [", lo, ", ", hi, ") but the slab holds rows [", a.in_start, ", ",
             a.in_start + a.in_local, ")");
  }
  Plan p;
  p.out_shape = g.lead;
  for (const Axis& a : g.ax) {
    p.in_plane *= a.in_local;
    p.out_plane *= a.out_end - a.out_start;
  }
  for (int k = 3 - g.dims; k < 3; ++k) p.out_shape.push_back(g.ax[k].out_end - g.ax[k].out_start);
  const Axis &a0 = g.ax[0], &a1 = g.ax[1], &a2 = g.ax[2];
  for (const Window& w0 : w[0])
    for (const Window& w1 : w[1])
      for (const Window& w2 : w[2]) {
        for (int64_t q0 : w0.pos)
          for (int64_t q1 : w1.pos)
            for (int64_t q2 : w2.pos) {
              p.local.push_back(((q0 - a0.in_start) * a1.in_local + (q1 - a1.in_start)) *
                                    a2.in_local +
                                q2 - a2.in_start);
              p.global.push_back((q0 * a1.in + q1) * a2.in + q2);
            }
        p.begin.push_back(static_cast<int64_t>(p.local.size()));
        p.span.push_back(w0.span * w1.span * w2.span);
        p.first.push_back((w0.first * a1.in + w1.first) * a2.in + w2.first);
      }
  return p;
}

// Per output element: the divisor of an average (0 where the window has no in-input element).
std::vector<double> divisors(const Plan& p, std::optional<int64_t> override, bool include_pad) {
  std::vector<double> d(p.out_plane);
  for (int64_t e = 0; e < p.out_plane; ++e)
    d[e] = p.taps(e) == 0         ? 0.0
           : override.has_value() ? static_cast<double>(*override)
           : include_pad          ? static_cast<double>(p.span[e])
                                  : static_cast<double>(p.taps(e));
  return d;
}

// out = window sums / div.
Tensor average(const Tensor& x, const Plan& p, const std::vector<double>& div) {
  const std::vector<double> in = x.to_vector<double>();
  std::vector<double> out(numel(p.out_shape), 0.0);
  const int64_t np = p.out_plane == 0 ? 0 : static_cast<int64_t>(out.size()) / p.out_plane;
  for (int64_t b = 0; b < np; ++b)
    for (int64_t e = 0; e < p.out_plane; ++e) {
      if (div[e] == 0) continue;
      double s = 0;
      for (int64_t t = p.begin[e]; t < p.begin[e + 1]; ++t) s += in[b * p.in_plane + p.local[t]];
      out[b * p.out_plane + e] = s / div[e];
    }
  return Tensor::from_vector(out, p.out_shape).to(x.dtype());
}

// The adjoint of average(): grad / div added to each window's elements.
Tensor average_backward(const char* op, const Tensor& grad_out, const Shape& input_shape,
                        const Plan& p, const std::vector<double>& div) {
  check_floating(op, grad_out, "grad_out");
  DT_CHECK(grad_out.sizes() == p.out_shape, op, ": grad_out ", shape_str(grad_out.sizes()),
           " must have the forward output's shape ", shape_str(p.out_shape));
  const std::vector<double> g = grad_out.to_vector<double>();
  std::vector<double> gin(numel(input_shape), 0.0);
  const int64_t np = p.out_plane == 0 ? 0 : static_cast<int64_t>(g.size()) / p.out_plane;
  for (int64_t b = 0; b < np; ++b)
    for (int64_t e = 0; e < p.out_plane; ++e) {
      if (div[e] == 0) continue;
      const double v = g[b * p.out_plane + e] / div[e];
      for (int64_t t = p.begin[e]; t < p.begin[e + 1]; ++t) gin[b * p.in_plane + p.local[t]] += v;
    }
  return Tensor::from_vector(gin, input_shape).to(grad_out.dtype());
}

Geometry adaptive_geometry(const char* op, const Shape& s, int dims, const std::vector<int64_t>& output_size,
                           const std::vector<PoolSlab>& slabs) {
  Geometry g = input_geometry(op, s, dims, slabs);
  const std::vector<int64_t> o = expand(op, "output_size", output_size, dims, {});
  DT_CHECK(static_cast<int>(o.size()) == dims && std::all_of(o.begin(), o.end(), [](int64_t v) { return v >= 0; }),
           op, ": output_size must have 1 or ", dims, " entries >= 0");
  for (int k = 0; k < dims; ++k) g.axis(k).out = o[k];
  set_outputs(g, slabs);
  return g;
}

}  // namespace

std::vector<int64_t> pool_output_size(const Shape& input_spatial,
                                      const std::vector<int64_t>& kernel_size,
                                      const std::vector<int64_t>& stride,
                                      const std::vector<int64_t>& padding,
                                      const std::vector<int64_t>& dilation, bool ceil_mode) {
  const char* op = "pool_output_size";
  const int dims = static_cast<int>(input_spatial.size());
  DT_CHECK(!kernel_size.empty(), op, ": kernel_size is empty");
  const std::vector<int64_t> k = expand(op, "kernel_size", kernel_size, dims, {});
  const std::vector<int64_t> s = expand(op, "stride", stride, dims, k);
  const std::vector<int64_t> p =
      expand(op, "padding", padding, dims, std::vector<int64_t>(dims, 0));
  const std::vector<int64_t> d =
      expand(op, "dilation", dilation, dims, std::vector<int64_t>(dims, 1));
  std::vector<int64_t> out(dims);
  for (int i = 0; i < dims; ++i)
    out[i] = output_size(op, input_spatial[i], k[i], s[i], p[i], d[i], ceil_mode, false);
  return out;
}

std::pair<int64_t, int64_t> pool_input_range(int64_t out_start, int64_t out_end, int64_t input_size,
                                             int64_t kernel, int64_t stride, int64_t padding,
                                             int64_t dilation) {
  const int64_t lo = std::clamp<int64_t>(out_start * stride - padding, 0, input_size);
  if (out_end <= out_start) return {lo, lo};
  const int64_t hi = std::clamp<int64_t>(
      (out_end - 1) * stride - padding + (kernel - 1) * dilation + 1, lo, input_size);
  return {lo, hi};
}

std::pair<int64_t, int64_t> adaptive_pool_input_range(int64_t out_start, int64_t out_end,
                                                      int64_t input_size, int64_t output_size) {
  DT_CHECK(output_size > 0, "adaptive_pool_input_range: output_size must be > 0");
  const int64_t lo = out_start * input_size / output_size;
  if (out_end <= out_start) return {lo, lo};
  return {lo, (out_end * input_size + output_size - 1) / output_size};
}

Tensor avg_pool(const Tensor& x, int dims, std::vector<int64_t> kernel_size,
                std::vector<int64_t> stride, std::vector<int64_t> padding, bool ceil_mode,
                bool count_include_pad, std::optional<int64_t> divisor_override,
                const std::vector<PoolSlab>& slabs) {
  DT_KERNEL_ON_DEVICE(avg_pool, x, dims, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, slabs);
  const char* op = "avg_pool";
  check_floating(op, x, "input");
  DT_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
           ": divisor_override must not be 0");
  Geometry g = pool_geometry(op, x.sizes(), dims, false, kernel_size, stride, padding, {1},
                             ceil_mode, slabs);
  Plan p = make_plan(g, false);
  return average(x, p, divisors(p, divisor_override, count_include_pad));
}

Tensor avg_pool_backward(const Tensor& grad_out, const Tensor& x, int dims,
                         std::vector<int64_t> kernel_size, std::vector<int64_t> stride,
                         std::vector<int64_t> padding, bool ceil_mode, bool count_include_pad,
                         std::optional<int64_t> divisor_override,
                         const std::vector<PoolSlab>& slabs) {
  DT_KERNEL_ON_DEVICE(avg_pool_backward, grad_out, x, dims, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override, slabs);
  const char* op = "avg_pool_backward";
  DT_CHECK(!divisor_override.has_value() || *divisor_override != 0, op,
           ": divisor_override must not be 0");
  Geometry g = pool_geometry(op, x.sizes(), dims, false, kernel_size, stride, padding, {1},
                             ceil_mode, slabs);
  Plan p = make_plan(g, false);
  return average_backward(op, grad_out, x.sizes(), p,
                          divisors(p, divisor_override, count_include_pad));
}

std::pair<Tensor, Tensor> max_pool_with_indices(const Tensor& x, int dims,
                                                std::vector<int64_t> kernel_size,
                                                std::vector<int64_t> stride,
                                                std::vector<int64_t> padding,
                                                std::vector<int64_t> dilation, bool ceil_mode,
                                                const std::vector<PoolSlab>& slabs) {
  DT_KERNEL_ON_DEVICE(max_pool_with_indices, x, dims, kernel_size, stride, padding, dilation, ceil_mode, slabs);
  const char* op = "max_pool_with_indices";
  check_floating(op, x, "input");
  Geometry g = pool_geometry(op, x.sizes(), dims, true, kernel_size, stride, padding, dilation,
                             ceil_mode, slabs);
  Plan p = make_plan(g, false);
  const std::vector<double> in = x.to_vector<double>();
  const int64_t n = numel(p.out_shape), np = p.out_plane == 0 ? 0 : n / p.out_plane;
  std::vector<double> val(n);
  std::vector<int64_t> idx(n);
  for (int64_t b = 0; b < np; ++b)
    for (int64_t e = 0; e < p.out_plane; ++e) {
      double best = -std::numeric_limits<double>::infinity();
      int64_t at = p.first[e];
      for (int64_t t = p.begin[e]; t < p.begin[e + 1]; ++t) {
        const double v = in[b * p.in_plane + p.local[t]];
        if (v > best || std::isnan(v)) best = v, at = p.global[t];
      }
      val[b * p.out_plane + e] = best;
      idx[b * p.out_plane + e] = at;
    }
  return {Tensor::from_vector(val, p.out_shape).to(x.dtype()),
          Tensor::from_vector(idx, p.out_shape)};
}

Tensor max_pool_backward(const Tensor& grad_out, const Tensor& indices, const Shape& input_shape,
                         int dims, const std::vector<PoolSlab>& slabs) {
  DT_KERNEL_ON_DEVICE(max_pool_backward, grad_out, indices, input_shape, dims, slabs);
  const char* op = "max_pool_backward";
  check_floating(op, grad_out, "grad_out");
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  const Geometry g = input_geometry(op, input_shape, dims, slabs);
  DT_CHECK(grad_out.sizes() == indices.sizes() &&
               grad_out.dim() == static_cast<int64_t>(input_shape.size()) &&
               std::equal(g.lead.begin(), g.lead.end(), grad_out.sizes().begin()),
           op, ": grad_out ", shape_str(grad_out.sizes()), " and indices ",
           shape_str(indices.sizes()), " must share the shape, with the leading dims of input ",
           shape_str(input_shape));
  const std::vector<double> gv = grad_out.to_vector<double>();
  const std::vector<int64_t> iv = indices.to_vector<int64_t>();
  const int64_t planes = numel(g.lead);
  const int64_t out_plane = planes == 0 ? 0 : static_cast<int64_t>(gv.size()) / planes;
  const Axis &a0 = g.ax[0], &a1 = g.ax[1], &a2 = g.ax[2];
  const int64_t in_plane = a0.in_local * a1.in_local * a2.in_local;
  std::vector<double> gin(numel(input_shape), 0.0);
  for (int64_t b = 0; b < planes; ++b)
    for (int64_t e = 0; e < out_plane; ++e) {
      const int64_t i = iv[b * out_plane + e];
      const int64_t q2 = i % a2.in - a2.in_start, q1 = i / a2.in % a1.in - a1.in_start,
                    q0 = i / (a2.in * a1.in) - a0.in_start;
      DT_CHECK(i >= 0 && q0 >= 0 && q0 < a0.in_local && q1 >= 0 && q1 < a1.in_local && q2 >= 0 &&
                   q2 < a2.in_local,
               op, ": index ", i, " is outside the input", slabs.empty() ? " " : " slab ",
               shape_str(input_shape));
      gin[b * in_plane + (q0 * a1.in_local + q1) * a2.in_local + q2] += gv[b * out_plane + e];
    }
  return Tensor::from_vector(gin, input_shape).to(grad_out.dtype());
}

Tensor adaptive_avg_pool(const Tensor& x, int dims, std::vector<int64_t> output_size,
                         const std::vector<PoolSlab>& slabs) {
  DT_KERNEL_HOST_ONLY(adaptive_avg_pool, x, dims, output_size, slabs);
  const std::string name = "adaptive_avg_pool" + std::to_string(dims) + "d";
  const char* op = name.c_str();
  check_floating(op, x, "input");
  Geometry g = adaptive_geometry(op, x.sizes(), dims, output_size, slabs);
  Plan p = make_plan(g, true);
  return average(x, p, divisors(p, std::nullopt, false));
}

Tensor adaptive_avg_pool_backward(const Tensor& grad_out, const Shape& input_shape, int dims,
                                  const std::vector<PoolSlab>& slabs) {
  DT_KERNEL_HOST_ONLY(adaptive_avg_pool_backward, grad_out, input_shape, dims, slabs);
  const std::string name = "adaptive_avg_pool" + std::to_string(dims) + "d_backward";
  const char* op = name.c_str();
  DT_CHECK(dims >= 1 && dims <= 3 && grad_out.dim() >= dims, op, ": grad_out ", shape_str(grad_out.sizes()),
           " must have ", dims, " spatial dims (1 to 3)");
  std::vector<int64_t> out(grad_out.sizes().end() - dims, grad_out.sizes().end());
  for (const PoolSlab& sl : slabs) {
    DT_CHECK(sl.dim >= 0 && sl.dim < dims && sl.output_size >= 0, op, ": slab of spatial dim ", sl.dim,
             " needs output_size (the global output size), got ", sl.output_size);
    out[sl.dim] = sl.output_size;
  }
  Geometry g = adaptive_geometry(op, input_shape, dims, out, slabs);
  Plan p = make_plan(g, true);
  return average_backward(op, grad_out, input_shape, p, divisors(p, std::nullopt, false));
}

}  // namespace dtensor::kernels
