#include "tools/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"
#include "dtensor/core/json.h"
#include "nlohmann/json.hpp"

namespace dtensor::tools {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kSampleSeconds = 0.02;  // a sample's back-to-back calls last about this long
constexpr int kMaxReps = 100;

std::vector<CommKind> kinds_of(const CalibrateOptions& o) {
  if (o.kinds.empty()) return {std::begin(kCalibratedKinds), std::end(kCalibratedKinds)};
  std::vector<CommKind> out;
  for (const std::string& k : o.kinds) out.push_back(comm_kind_from_name(k));
  return out;
}

// `numel` elements split over `parts` as evenly as possible, the first ones one larger.
std::vector<int64_t> split(int64_t numel, int64_t parts) {
  std::vector<int64_t> c(parts, numel / parts);
  for (int64_t i = 0; i < numel % parts; ++i) ++c[i];
  return c;
}

// The buffers and the call of one collective on one rank of `pg`, for a group buffer of `size` bytes.
class Op {
 public:
  Op(CommKind kind, ProcessGroup& pg, int64_t size, Device device) : kind_(kind), pg_(pg) {
    const int64_t numel = size / 4, n = pg.size(), me = pg.rank();
    auto buf = [&](int64_t count) { return Tensor::zeros({count}, DType::kFloat32, device); };
    switch (kind) {
      case CommKind::kAllReduce:
      case CommKind::kBroadcast: a_ = buf(numel); break;
      case CommKind::kAllGather:
      case CommKind::kReduceScatter:
        counts_ = split(numel, n);
        a_ = buf(kind == CommKind::kAllGather ? counts_[me] : numel);
        b_ = buf(kind == CommKind::kAllGather ? numel : counts_[me]);
        break;
      case CommKind::kAllToAll: {
        // Block (r, d): what rank r sends rank d; n^2 blocks hold the group's `numel` elements.
        const std::vector<int64_t> blocks = split(numel, n * n);
        for (int64_t d = 0; d < n; ++d) counts_.push_back(blocks[me * n + d]);
        for (int64_t r = 0; r < n; ++r) recv_counts_.push_back(blocks[r * n + me]);
        int64_t in = 0, out = 0;
        for (int64_t d = 0; d < n; ++d) in += counts_[d], out += recv_counts_[d];
        a_ = buf(in);
        b_ = buf(out);
        break;
      }
      case CommKind::kSendRecv:
        a_ = buf(numel);
        b_ = buf(numel);
        break;
      default: DT_FAIL("dtensor calibrate: ", comm_kind_name(kind), " is not measured");
    }
  }

  void run() {
    switch (kind_) {
      case CommKind::kAllReduce: pg_.all_reduce(a_, ReduceOp::kSum); break;
      case CommKind::kBroadcast: pg_.broadcast(a_, 0); break;
      case CommKind::kAllGather: pg_.all_gather(a_, b_, counts_); break;
      case CommKind::kReduceScatter: pg_.reduce_scatter(a_, b_, counts_, ReduceOp::kSum); break;
      case CommKind::kAllToAll: pg_.all_to_all(a_, counts_, b_, recv_counts_); break;
      case CommKind::kSendRecv: {
        // A ring shift: every rank sends one message to the next and receives one from the previous.
        const int n = pg_.size(), me = pg_.rank();
        std::vector<P2POp> ops = {{P2POp::kSend, a_, (me + 1) % n}, {P2POp::kRecv, b_, (me + n - 1) % n}};
        pg_.batch_isend_irecv(ops);
        break;
      }
      default: break;
    }
  }

 private:
  CommKind kind_;
  ProcessGroup& pg_;
  Tensor a_, b_;
  std::vector<int64_t> counts_, recv_counts_;
};

// The largest value over the world's ranks.
double world_max(ProcessGroup& world, double v) {
  Tensor t = Tensor::full({1}, v, DType::kFloat64);
  world.all_reduce(t, ReduceOp::kMax);
  return t.data<double>()[0];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

void validate_calibrate_options(const CalibrateOptions& o) {
  DT_CHECK(o.backend == "threads" || o.backend == "gloo" || o.backend == "nccl", "--backend '", o.backend,
           "': accepted: threads, gloo, nccl");
  for (auto [flag, v] : {std::pair{"min", o.min_bytes}, {"max", o.max_bytes}})
    DT_CHECK(v >= kMinCalibrateBytes && v <= kMaxCalibrateBytes && v % 4 == 0, "--sizes: the ", flag, " size ", v,
             " B is out of range: accepted: multiples of 4 from ", kMinCalibrateBytes, " B to ",
             kMaxCalibrateBytes, " B (1G)");
  DT_CHECK(o.min_bytes <= o.max_bytes, "--sizes: min ", o.min_bytes, " B is above max ", o.max_bytes, " B");
  DT_CHECK(o.iters >= 1 && o.iters <= kMaxCalibrateIters, "--iters ", o.iters, ": accepted: 1 to ",
           kMaxCalibrateIters);
  DT_CHECK(o.warmup >= 0 && o.warmup <= kMaxCalibrateIters, "--warmup ", o.warmup, ": accepted: 0 to ",
           kMaxCalibrateIters);
  DT_CHECK(std::isfinite(o.budget_s) && o.budget_s > 0, "--budget ", o.budget_s, ": accepted: a finite number > 0");
  DT_CHECK(o.rounds >= 1 && o.rounds <= kMaxCalibrateRounds, "--rounds ", o.rounds, ": accepted: 1 to ",
           kMaxCalibrateRounds);
  if (o.backend == "threads")
    DT_CHECK(o.ranks >= 2 && o.ranks <= kMaxCalibrateRanks, "--ranks ", o.ranks, ": accepted: 2 to ",
             kMaxCalibrateRanks);
  for (const std::string& k : o.kinds) {
    const CommKind kind = comm_kind_from_name(k);
    DT_CHECK(std::find(std::begin(kCalibratedKinds), std::end(kCalibratedKinds), kind) != std::end(kCalibratedKinds),
             "--kinds: '", k, "' is not measured; accepted: all_reduce, all_gather, reduce_scatter, all_to_all, "
             "broadcast, send_recv");
  }
  if (!o.base.empty()) hardware_profile(o.base);  // throws listing the known profiles
}

std::vector<int64_t> calibrate_sizes(int64_t min_bytes, int64_t max_bytes) {
  std::vector<int64_t> s;
  for (int64_t b = min_bytes; b <= max_bytes; b *= 4) {
    s.push_back(b);
    if (b > max_bytes / 4) break;
  }
  if (s.empty() || s.back() != max_bytes) s.push_back(max_bytes);
  return s;
}

std::vector<int> calibrate_group_sizes(int world_size) {
  std::vector<int> g;
  for (int n = world_size; n >= 2; n /= 2) {
    g.push_back(n);
    if (n % 2) break;
  }
  return g;
}

std::vector<CollectiveTiming> measure_collectives(Backend& backend, const CalibrateOptions& o, Device device) {
  const int world_size = backend.world_size(), me = backend.rank();
  std::vector<int> all(world_size);
  for (int r = 0; r < world_size; ++r) all[r] = r;
  auto world = backend.new_group(all, "calibrate/world");
  const std::vector<int64_t> sizes = calibrate_sizes(o.min_bytes, o.max_bytes);
  const std::vector<CommKind> kinds = kinds_of(o);
  const int rounds = std::max(o.rounds, 1);
  std::vector<CollectiveTiming> out;
  for (int g : calibrate_group_sizes(world_size)) {
    // This rank's block of g contiguous ranks (the inner mesh dims' groups).
    std::vector<int> members(g);
    for (int i = 0; i < g; ++i) members[i] = me / g * g + i;
    auto pg = g == world_size ? world : backend.new_group(members, absl::StrCat("calibrate/group", g, "/", me / g));
    // Every (kind, size) once per round, so that a drift of the machine's load spreads over all of
    // them instead of biasing the ones measured while it lasted; the timing is the median of all
    // rounds' samples.
    std::vector<std::vector<double>> samples(kinds.size() * sizes.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < kinds.size(); ++k) {
        for (size_t j = 0; j < sizes.size(); ++j) {
          Op op(kinds[k], *pg, sizes[j], device);
          for (int i = 0; i < o.warmup; ++i) op.run();
          // One timed call sets, the same on every rank, how many back-to-back calls make a sample
          // (about kSampleSeconds) and how many samples fit this round's share of the budget.
          world->barrier();
          auto t0 = Clock::now();
          op.run();
          const double first = std::max(world_max(*world, seconds_since(t0)), 1e-9);
          const int reps = std::clamp(static_cast<int>(std::ceil(kSampleSeconds / first)), 1, kMaxReps);
          const int most = std::max(1, (o.iters + rounds - 1) / rounds);
          const int least = std::min(most, std::max(1, (kMinIters + rounds - 1) / rounds));
          const int n = std::clamp(static_cast<int>(o.budget_s / rounds / (first * reps)), least, most);
          Tensor us = Tensor::empty({n}, DType::kFloat64);
          for (int i = 0; i < n; ++i) {
            world->barrier();
            t0 = Clock::now();
            for (int r = 0; r < reps; ++r) op.run();
            us.data<double>()[i] = seconds_since(t0) * 1e6 / reps;
          }
          // A sample's time is its slowest rank's.
          world->all_reduce(us, ReduceOp::kMax);
          samples[k * sizes.size() + j].insert(samples[k * sizes.size() + j].end(), us.data<double>(),
                                               us.data<double>() + n);
        }
      }
    }
    for (size_t k = 0; k < kinds.size(); ++k)
      for (size_t j = 0; j < sizes.size(); ++j)
        out.push_back({kinds[k], g, sizes[j], median(samples[k * sizes.size() + j])});
  }
  return out;
}

std::string calibrated_profile_json(const std::vector<CollectiveTiming>& timings, const HardwareProfile& base,
                                    const std::string& name, const std::string& description, int ranks_per_host,
                                    const FitOptions& fit) {
  std::map<CommKind, std::vector<CollectiveTiming>> by_kind;
  for (const CollectiveTiming& t : timings) by_kind[t.kind].push_back(t);
  DT_CHECK(!by_kind.empty(), "dtensor calibrate: no timings to fit");
  using nlohmann::json;
  auto link_json = [](const LinkModel& l) {
    return json{{"base_latency_us", l.base_latency_us}, {"latency_us", l.latency_us}, {"bandwidth_GBps", l.bandwidth_GBps}};
  };
  json collectives = json::object();
  CollectiveModel link_default;
  for (const auto& [kind, ts] : by_kind) {
    const CollectiveModel m = fit_collective(ts, fit);
    if (kind == by_kind.begin()->first) link_default = m;  // all_reduce's when measured (CommKind order)
    json measured = json::array();
    for (const CollectiveTiming& t : ts) measured.push_back({{"ranks", t.group_size}, {"size", t.size}, {"time_us", t.time_us}});
    json by_group = json::object();
    for (const auto& [g, ranges] : m.by_group_size) {
      json rs = json::array();
      for (const CollectiveSegment& r : ranges) {
        json range = {{"from_bytes", r.from_bytes}, {"latency_us", r.latency_us}};
        if (r.us_per_byte > 0) range["bandwidth_GBps"] = 1.0 / (r.us_per_byte * 1e3);
        rs.push_back(range);
      }
      by_group[std::to_string(g)] = rs;
    }
    collectives[comm_kind_name(kind)] = {{"base_latency_us", m.base_latency_us},
                                         {"latency_us", m.latency_us},
                                         {"bandwidth_GBps", m.bandwidth_GBps},
                                         {"by_group_size", by_group},
                                         {"measured", measured}};
  }
  json intra = {{"base_latency_us", link_default.base_latency_us},
                {"latency_us", link_default.latency_us},
                {"bandwidth_GBps", link_default.bandwidth_GBps},
                {"collectives", collectives}};
  json peak = json::object();
  for (const auto& [k, v] : base.peak_tflops) peak[k] = v;
  json j = {{"name", name},
            {"description", description},
            {"ranks_per_host", ranks_per_host},
            {"links", {{"intra_host", intra}, {"inter_host", link_json(base.inter_host)}}},
            {"compute",
             {{"peak_tflops", peak}, {"memory_bandwidth_GBps", base.memory_bandwidth_GBps}, {"memory_GB", base.memory_GB}}},
            {"sources", absl::StrCat("intra_host: dtensor calibrate (fit: propagation/collective_fit.h; "
                                     "by_group_size: at most ", fit.max_ranges, " message-size ranges per group "
                                     "size, by BIC; the formula for other group sizes: bandwidth from buffers >= ",
                                     fit.bandwidth_min_bytes, " B, latency from buffers <= ", fit.latency_max_bytes,
                                     " B); inter_host and compute: profile '", base.name, "' (not measured)")}};
  return j.dump(2) + "\n";
}

std::vector<CollectiveTiming> measured_timings(const std::string& profile_json) {
  const nlohmann::json j = parse_json(profile_json, "dtensor calibrate --refit");
  std::vector<CollectiveTiming> out;
  try {
    const auto& cs = j.at("links").at("intra_host").at("collectives");
    for (const auto& [kind_name, c] : cs.items()) {
      const CommKind kind = comm_kind_from_name(kind_name);
      DT_CHECK(c.contains("measured"), "dtensor calibrate --refit: links.intra_host.collectives.", kind_name,
               " has no 'measured' list (not written by dtensor calibrate)");
      for (const auto& t : c.at("measured"))
        out.push_back({kind, t.at("ranks").get<int64_t>(), t.at("size").get<int64_t>(), t.at("time_us").get<double>()});
    }
  } catch (const nlohmann::json::exception& e) {
    DT_FAIL("dtensor calibrate --refit: not a calibrated profile (links.intra_host.collectives.KIND.measured: "
            "ranks, size, time_us): ", json_error_message(e));
  }
  DT_CHECK(!out.empty(), "dtensor calibrate --refit: the profile holds no measurements");
  return out;
}

void print_calibration_table(const std::vector<CollectiveTiming>& timings, const LinkModel& link, std::ostream& out) {
  out << absl::StrFormat("# %-14s %5s %12s %12s %10s %10s %12s %8s\n", "kind", "ranks", "size(B)", "time(us)",
                         "algbw(GB/s)", "busbw(GB/s)", "pred(us)", "err(%)");
  for (const CollectiveTiming& t : timings) {
    const double pred = predicted_time_us(link.model(t.kind), t);
    out << absl::StrFormat("  %-14s %5d %12d %12.2f %10.3f %10.3f %12.2f %+8.1f\n", comm_kind_name(t.kind),
                           t.group_size, t.size, t.time_us, static_cast<double>(t.size) / t.time_us / 1e3,
                           static_cast<double>(t.bytes_sent()) / t.time_us / 1e3, pred,
                           100.0 * (pred - t.time_us) / t.time_us);
  }
  for (CommKind k : kCalibratedKinds) {
    if (!link.collectives[static_cast<int>(k)]) continue;
    const CollectiveModel m = link.model(k);
    out << absl::StrFormat("# fit %-14s base %.2f us + %.3f us/step + bytes_sent / %.3f GB/s\n", comm_kind_name(k),
                           m.base_latency_us, m.latency_us, m.bandwidth_GBps);
    for (const auto& [g, ranges] : m.by_group_size)
      for (const CollectiveSegment& r : ranges)
        out << absl::StrFormat("#   %d ranks, bytes_sent >= %d: %.2f us + bytes_sent / %s\n", g, r.from_bytes,
                               r.latency_us,
                               r.us_per_byte > 0 ? absl::StrFormat("%.3f GB/s", 1.0 / (r.us_per_byte * 1e3))
                                                 : std::string("inf (flat)"));
  }
}

}  // namespace dtensor::tools
