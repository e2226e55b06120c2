#include "propagation/collective_fit.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <set>

#include "dtensor/core/error.h"

namespace dtensor {
namespace {

// Weighted least squares y = a + b x; false when x does not vary.
bool line_fit(const std::vector<double>& x, const std::vector<double>& y, const std::vector<double>& w, double* a,
              double* b) {
  double sw = 0, mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) sw += w[i], mx += w[i] * x[i], my += w[i] * y[i];
  mx /= sw, my /= sw;
  double sxx = 0, sxy = 0;
  for (size_t i = 0; i < x.size(); ++i) sxx += w[i] * (x[i] - mx) * (x[i] - mx), sxy += w[i] * (x[i] - mx) * (y[i] - my);
  if (!(sxx > 0)) return false;
  *b = sxy / sxx;
  *a = my - *b * mx;
  return true;
}

double sse(const std::vector<double>& k, const std::vector<double>& r, const std::vector<double>& w, double base,
           double per_step) {
  double s = 0;
  for (size_t i = 0; i < k.size(); ++i) s += w[i] * std::pow(r[i] - base - per_step * k[i], 2);
  return s;
}

// One range's line y = a + b x over points (x, y), minimising the sum of ((a + b x) / y - 1)^2 with
// a, b >= 0: the unconstrained solution when both are >= 0, else the better of a only and b only.
// Returns the sum of squared relative errors.
double fit_line(const std::vector<double>& x, const std::vector<double>& y, size_t begin, size_t end, double* a,
                double* b) {
  std::vector<double> xs(x.begin() + begin, x.begin() + end), ys(y.begin() + begin, y.begin() + end), w;
  for (double v : ys) w.push_back(1.0 / (v * v));
  auto rel_sse = [&](double aa, double bb) {
    double s = 0;
    for (size_t i = 0; i < xs.size(); ++i) s += std::pow((aa + bb * xs[i]) / ys[i] - 1, 2);
    return s;
  };
  double best = std::numeric_limits<double>::infinity();
  auto consider = [&](double aa, double bb) {
    if (const double s = rel_sse(aa, bb); s < best) best = s, *a = aa, *b = bb;
  };
  double aa = 0, bb = 0;
  if (line_fit(xs, ys, w, &aa, &bb) && aa >= 0 && bb >= 0) consider(aa, bb);
  double s1 = 0, s2 = 0, sx = 0, sxx = 0;
  for (size_t i = 0; i < xs.size(); ++i)
    s1 += 1 / ys[i], s2 += w[i], sx += xs[i] / ys[i], sxx += w[i] * xs[i] * xs[i];
  consider(s1 / s2, 0);                               // latency only
  if (sxx > 0) consider(0, std::max(sx / sxx, 0.0));  // bytes only
  return best;
}

}  // namespace

double predicted_time_us(const CollectiveModel& m, const CollectiveTiming& t) {
  return m.time_us(t.kind, t.bytes_sent(), t.group_size);
}

std::vector<CollectiveSegment> fit_ranges(const std::vector<CollectiveTiming>& timings, const FitOptions& o) {
  DT_CHECK(!timings.empty(), "fit_ranges: no timings");
  std::vector<CollectiveTiming> ts = timings;
  for (const CollectiveTiming& t : ts)
    DT_CHECK(t.kind == ts[0].kind && t.group_size == ts[0].group_size && std::isfinite(t.time_us) && t.time_us > 0,
             "fit_ranges: timings of one kind and group size with finite times > 0 expected (",
             comm_kind_name(ts[0].kind), " on ", ts[0].group_size, " ranks, then ", comm_kind_name(t.kind), " on ",
             t.group_size, " ranks, ", t.time_us, " us)");
  std::stable_sort(ts.begin(), ts.end(),
                   [](const CollectiveTiming& p, const CollectiveTiming& q) { return p.bytes_sent() < q.bytes_sent(); });
  const size_t n = ts.size();
  std::vector<double> x(n), y(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(ts[i].bytes_sent()), y[i] = ts[i].time_us;
  // Splits into ranges at cuts (indices where a range starts, strictly between points of different
  // sizes), searched exhaustively: at most max_ranges - 1 cuts over a few dozen sizes.
  const size_t min_pts = static_cast<size_t>(std::max(o.min_range_points, 1));
  struct Split {
    std::vector<size_t> starts;  // first point of each range
    double sse = 0;              // over the points kept (all but the `trim` worst)
  };
  std::vector<Split> candidates;
  std::vector<size_t> starts = {0};
  // The criterion's residuals leave out the `trim` worst points (least trimmed squares, Rousseeuw
  // 1984): one timing off by 10x (measured: the first size of a freshly made 2-rank group, 5-14x its
  // neighbours) otherwise dominates every candidate's sum alike, and the criterion then refuses the
  // ranges the other sizes need. The lines themselves are still fitted to every point.
  const size_t want_trim = static_cast<size_t>(std::max(o.trimmed_points, 0));
  const size_t trim = n > want_trim + 2 ? want_trim : 0;
  auto score = [&](const std::vector<size_t>& st) {
    std::vector<double> err;
    for (size_t r = 0; r < st.size(); ++r) {
      const size_t b = st[r], e = r + 1 < st.size() ? st[r + 1] : n;
      double lat = 0, per_byte = 0;
      fit_line(x, y, b, e, &lat, &per_byte);
      for (size_t i = b; i < e; ++i) err.push_back(std::pow((lat + per_byte * x[i]) / y[i] - 1, 2));
    }
    std::sort(err.begin(), err.end());
    double s = 0;
    for (size_t i = 0; i + trim < err.size(); ++i) s += err[i];
    return s;
  };
  std::function<void()> extend = [&] {
    candidates.push_back({starts, score(starts)});
    if (static_cast<int>(starts.size()) >= o.max_ranges) return;
    for (size_t c = starts.back() + min_pts; c + min_pts <= n; ++c) {
      if (x[c - 1] == x[c]) continue;
      starts.push_back(c);
      extend();
      starts.pop_back();
    }
  };
  extend();
  auto bic = [&](const Split& s) {
    const double nn = static_cast<double>(n - trim);
    const double p = 3.0 * static_cast<double>(s.starts.size()) - 1;
    return nn * std::log(std::max(s.sse / nn, 1e-12)) + p * std::log(nn);
  };
  const Split& best = *std::min_element(candidates.begin(), candidates.end(),
                                        [&](const Split& p, const Split& q) { return bic(p) < bic(q); });
  std::vector<CollectiveSegment> out;
  for (size_t r = 0; r < best.starts.size(); ++r) {
    const size_t b = best.starts[r], e = r + 1 < best.starts.size() ? best.starts[r + 1] : n;
    CollectiveSegment seg;
    fit_line(x, y, b, e, &seg.latency_us, &seg.us_per_byte);
    if (r > 0) {
      const double lo = x[b - 1], hi = x[b];
      seg.from_bytes = lo > 0 ? static_cast<int64_t>(std::ceil(std::sqrt(lo * hi))) : static_cast<int64_t>(hi);
      seg.from_bytes = std::clamp(seg.from_bytes, out.back().from_bytes + 1, static_cast<int64_t>(hi));
    }
    out.push_back(seg);
  }
  return out;
}

CollectiveModel fit_collective(const std::vector<CollectiveTiming>& timings, const FitOptions& o) {
  DT_CHECK(!timings.empty(), "fit_collective: no timings");
  const CommKind kind = timings[0].kind;
  std::set<int64_t> sizes;
  for (const CollectiveTiming& t : timings) {
    DT_CHECK(t.kind == kind, "fit_collective: timings of ", comm_kind_name(kind), " and ", comm_kind_name(t.kind),
             " mixed");
    DT_CHECK(t.group_size >= 2 && t.size >= 0 && std::isfinite(t.time_us) && t.time_us > 0, "fit_collective: ",
             comm_kind_name(kind), " timing of ", t.size, " B on ", t.group_size, " ranks: ", t.time_us,
             " us (needs group >= 2, size >= 0, a finite time > 0)");
    sizes.insert(t.size);
  }
  // 1. Bandwidth from the large sizes.
  int64_t large = o.bandwidth_min_bytes;
  if (std::count_if(sizes.begin(), sizes.end(), [&](int64_t s) { return s >= large; }) < 2)
    large = sizes.size() >= 2 ? *std::prev(sizes.end(), 2) : *sizes.rbegin();
  // Within each group size (its own latency), then pooled: the slope of time on bytes_sent, each
  // timing weighted by 1 / time^2 so that the squared errors are relative ones.
  struct Point {
    double x, y, w;
  };
  std::map<int64_t, std::vector<Point>> by_group;
  const CollectiveTiming* biggest = &timings[0];
  for (const CollectiveTiming& t : timings) {
    if (t.bytes_sent() > biggest->bytes_sent()) biggest = &t;
    if (t.size < large) continue;
    by_group[t.group_size].push_back({static_cast<double>(t.bytes_sent()), t.time_us, 1.0 / (t.time_us * t.time_us)});
  }
  double sxx = 0, sxy = 0;
  for (const auto& [g, pts] : by_group) {
    double sw = 0, mx = 0, my = 0;
    for (const Point& p : pts) sw += p.w, mx += p.w * p.x, my += p.w * p.y;
    mx /= sw, my /= sw;
    for (const Point& p : pts) sxx += p.w * (p.x - mx) * (p.x - mx), sxy += p.w * (p.x - mx) * (p.y - my);
  }
  CollectiveModel m;
  if (sxx > 0 && sxy > 0) {
    m.bandwidth_GBps = sxx / sxy / 1e3;  // 1 / slope, bytes per µs -> GB/s
  } else {
    // No usable slope (a flat curve, or nothing is sent): the largest timing's average rate.
    const double b = static_cast<double>(std::max<int64_t>(biggest->bytes_sent(), 1));
    m.bandwidth_GBps = b / biggest->time_us / 1e3;
  }
  // 2. Latency from the small sizes' residuals.
  const int64_t small = std::max(o.latency_max_bytes, *sizes.begin());
  std::vector<double> k, r, w;
  for (const CollectiveTiming& t : timings) {
    if (t.size > small) continue;
    k.push_back(static_cast<double>(ring_steps(t.kind, t.group_size)));
    r.push_back(t.time_us - static_cast<double>(t.bytes_sent()) / m.bytes_per_us());
    w.push_back(1.0 / (t.time_us * t.time_us));
  }
  if (o.by_group_size) {
    std::map<int64_t, std::vector<CollectiveTiming>> groups;
    for (const CollectiveTiming& t : timings) groups[t.group_size].push_back(t);
    for (const auto& [g, ts] : groups) m.by_group_size[g] = fit_ranges(ts, o);
  }
  double base = 0, per_step = 0;
  if (line_fit(k, r, w, &base, &per_step) && base >= 0 && per_step >= 0) {
    m.base_latency_us = base;
    m.latency_us = per_step;
    return m;
  }
  // Base only (weighted mean residual) or per step only (through the origin); the better, clamped at 0.
  double sw = 0, mean = 0, kr = 0, kk = 0;
  for (size_t i = 0; i < k.size(); ++i) sw += w[i], mean += w[i] * r[i], kr += w[i] * k[i] * r[i], kk += w[i] * k[i] * k[i];
  mean = std::max(mean / sw, 0.0);
  const double step_only = kk > 0 ? std::max(kr / kk, 0.0) : 0.0;
  const bool distinct_steps = std::adjacent_find(k.begin(), k.end(), std::not_equal_to<>()) != k.end();
  if (distinct_steps && sse(k, r, w, 0, step_only) < sse(k, r, w, mean, 0)) {
    m.latency_us = step_only;
  } else {
    m.base_latency_us = mean;
  }
  return m;
}

}  // namespace dtensor
