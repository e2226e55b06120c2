#include "planner/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"

namespace dtensor::planner {

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kZeroBubbleH1: return "zb-h1";
  }
  return "?";
}

Schedule schedule_from_name(const std::string& name) {
  if (name == "1f1b") return Schedule::k1F1B;
  if (name == "interleaved") return Schedule::kInterleaved;
  if (name == "zb-h1") return Schedule::kZeroBubbleH1;
  DT_FAIL("pipeline schedule '", name, "' is not accepted; accepted: 1f1b, interleaved, zb-h1");
}

double micro_batches_in_flight(Schedule s, int p, int m, int v, int i) {
  if (s == Schedule::kInterleaved && v > 1) {
    // Megatron-LM's interleaved warm-up, (p - i - 1) 2 + (v - 1) p chunk forwards, and the steady
    // state's next forward before the first backward; each chunk 1/v of the device's layers.
    const int64_t chunks = std::min<int64_t>(2 * int64_t{p - i - 1} + int64_t{v - 1} * p + 1, int64_t{m} * v);
    return static_cast<double>(chunks) / v;
  }
  return std::min(p - i, m);  // 1F1B and ZB-H1: p - i forwards before the first backward
}

ScheduleTimes schedule_times(Schedule s, int p, int m, int v, const StageTimes& t, double once_us, double p2p_us) {
  ScheduleTimes out;
  out.busy_us = m * t.total();
  switch (s) {
    case Schedule::k1F1B:
      out.bubble_us = (p - 1) * t.total();
      out.sends_us = 2.0 * (p - 1) * p2p_us;
      break;
    case Schedule::kInterleaved:
      out.bubble_us = (p - 1) * t.total() / v;
      out.sends_us = 2.0 * (p - 1) * v * p2p_us;
      break;
    case Schedule::kZeroBubbleH1:
      out.bubble_us = (p - 1) * std::max(0.0, t.f_us + t.b_us - t.w_us);
      out.sends_us = 2.0 * (p - 1) * p2p_us;
      break;
  }
  out.step_us = out.busy_us + out.bubble_us + once_us + out.sends_us;
  return out;
}

std::vector<int> balance_layers(const std::vector<StageModel>& s, int layers, double limit) {
  const int p = static_cast<int>(s.size());
  DT_CHECK(p >= 1, "pipeline: no stages to balance");
  // The most layers each stage holds: its own bound and the memory limit.
  std::vector<int> most(p);
  std::vector<std::string> why(p);
  int64_t room = 0, least = 0;
  for (int i = 0; i < p; ++i) {
    most[i] = s[i].max_layers;
    why[i] = absl::StrCat("at most ", most[i]);
    if (s[i].layer_bytes > 0) {
      const double fit = std::floor((limit - s[i].fixed_bytes) / s[i].layer_bytes);
      if (fit < most[i]) {
        most[i] = fit < -1 ? -1 : static_cast<int>(fit);
        why[i] = absl::StrFormat("%s fit in %.2f GB (%.2f GB fixed + %.2f GB a layer)",
                                 most[i] <= 0 ? "no layers" : absl::StrCat("at most ", most[i], " layers"), limit / 1e9,
                                 s[i].fixed_bytes / 1e9, s[i].layer_bytes / 1e9);
      }
    } else if (s[i].fixed_bytes > limit) {
      most[i] = -1;
      why[i] = absl::StrFormat("its fixed part needs %.2f GB, over the %.2f GB limit", s[i].fixed_bytes / 1e9,
                               limit / 1e9);
    }
    room += std::max(most[i], 0);
    least += s[i].min_layers;
  }
  std::vector<std::string> each;
  bool fits = room >= layers && least <= layers;
  for (int i = 0; i < p; ++i) {
    fits &= most[i] >= s[i].min_layers;
    each.push_back(absl::StrCat("stage ", i, ": ", why[i], " (needs at least ", s[i].min_layers, ")"));
  }
  DT_CHECK(fits, "pipeline: no partition of ", layers, " layers over ", p, " stages fits the memory limit: ",
           absl::StrJoin(each, "; "));
  // Water-filling: each layer where the stage it lengthens ends least (then needs the least
  // memory, then the later stage), on `key`'s (value after, tie-breakers), within `top`.
  auto fill = [&](const std::vector<int>& top, auto key) {
    std::vector<int> n(p);
    for (int i = 0; i < p; ++i) n[i] = s[i].min_layers;
    for (int left = layers - static_cast<int>(least); left > 0; --left) {
      int best = -1;
      for (int i = 0; i < p; ++i)
        if (n[i] < top[i] && (best < 0 || key(i, n[i] + 1) <= key(best, n[best] + 1))) best = i;
      DT_CHECK(best >= 0, "pipeline: no partition of ", layers, " layers over ", p, " stages within their bounds");
      ++n[best];
    }
    return n;
  };
  auto time = [&](int i, int k) { return s[i].fixed_us + k * s[i].layer_us; };
  auto bytes = [&](int i, int k) { return s[i].fixed_bytes + k * s[i].layer_bytes; };
  auto once = [&](int i, int k) { return s[i].fixed_once_us + k * s[i].layer_once_us; };
  const std::vector<int> fastest = fill(most, [&](int i, int k) { return std::make_tuple(time(i, k), bytes(i, k)); });
  // Then, as fast (no stage slower than the slowest above), the longest optimizer update least.
  double slowest = 0;
  for (int i = 0; i < p; ++i) slowest = std::max(slowest, time(i, fastest[i]));
  std::vector<int> top(p);
  for (int i = 0; i < p; ++i)
    for (top[i] = std::min(most[i], layers); top[i] > fastest[i] && time(i, top[i]) > slowest * (1 + 1e-12);) --top[i];
  return fill(top, [&](int i, int k) { return std::make_tuple(once(i, k), time(i, k), bytes(i, k)); });
}

}  // namespace dtensor::planner
