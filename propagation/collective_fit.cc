#include "propagation/collective_fit.h"

#include <algorithm>
#include <cmath>
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

}  // namespace

double predicted_time_us(const CollectiveModel& m, const CollectiveTiming& t) {
  return m.base_latency_us + m.latency_us * static_cast<double>(ring_steps(t.kind, t.group_size)) +
         static_cast<double>(t.bytes_sent()) / m.bytes_per_us();
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
