// `dtensor calibrate --backend threads|gloo|nccl --out FILE [--ranks N] [--sizes MIN:MAX] [--iters N]
// [--warmup N] [--budget S] [--rounds N] [--kinds LIST] [--base PROFILE] [--name NAME] [--refit FILE]`:
// measures the collectives and writes a hardware profile (tools/calibrate.h); with --refit, fits
// the measurements an earlier profile keeps instead of measuring. Thread ranks run in this process;
// Gloo and NCCL ranks are processes, one per rank, started by `dtensor launch -n N -- dtensor
// calibrate --backend gloo ...` (rank 0 writes --out and prints the table).
#include <unistd.h>

#include <ctime>
#include <iostream>
#include <sys/stat.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/threads_backend.h"
#include "dtensor/core/file_io.h"
#include "tools/calibrate.h"
#include "tools/subcommands.h"
#ifdef DTENSOR_HAVE_NCCL
#include "dtensor/collectives/nccl_backend.h"
#include "dtensor/core/cuda/cuda_util.h"
#endif

namespace dtensor::tools {
namespace {

// "64", "64K", "8M", "1G" (binary multiples) -> bytes; false when malformed or too large.
bool parse_bytes(std::string s, int64_t* out) {
  int64_t mult = 1;
  if (!s.empty()) {
    switch (absl::ascii_toupper(s.back())) {
      case 'K': mult = int64_t{1} << 10; break;
      case 'M': mult = int64_t{1} << 20; break;
      case 'G': mult = int64_t{1} << 30; break;
      default: break;
    }
    if (mult != 1) s.pop_back();
  }
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v) || v < 0 || v > (int64_t{1} << 40) / mult) return false;
  *out = v * mult;
  return true;
}

// The directory `path` would be written in must be writable, and `path` not a directory.
std::string unwritable_reason(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "it is a directory";
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "no directory " + dir;
  if (access(dir.c_str(), W_OK) != 0) return "directory " + dir + " is not writable";
  return "";
}

std::string utc_now() {
  char buf[64];
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M UTC", &tm);
  return buf;
}

std::string host_name() {
  char buf[256] = {};
  return gethostname(buf, sizeof buf - 1) == 0 ? std::string(buf) : "?";
}

// Rank 0's part after the measurement: write the profile, read it back as --hardware would, print.
void write_profile(const std::vector<CollectiveTiming>& timings, const CalibrateOptions& o, int world,
                   int ranks_per_host, const std::string& what = "") {
  const HardwareProfile& base = hardware_profile(!o.base.empty() ? o.base : o.backend == "nccl" ? "h100-nvlink" : "cpu-tcp");
  const std::string name = o.name.empty() ? "calibrated-" + o.backend : o.name;
  const std::string description =
      !what.empty() ? what
                    : absl::StrCat("dtensor calibrate --backend ", o.backend, ": ", world, " ranks on ", host_name(),
                                   ", ", utc_now());
  const std::string text = calibrated_profile_json(timings, base, name, description, ranks_per_host);
  write_file_atomic(o.out, text);
  const HardwareProfile loaded = HardwareProfile::from_json(text);
  std::cout << "# dtensor calibrate: " << description << "\n";
  print_calibration_table(timings, loaded.intra_host, std::cout);
  std::cout << "# wrote " << o.out << " (use: --hardware " << o.out << ")\n" << std::flush;
}

void run_calibrate(const CalibrateOptions& o, const std::string& refit) {
  try {
    validate_calibrate_options(o);
  } catch (const Error& e) {
    throw CLI::ValidationError("calibrate", e.what());
  }
  if (const std::string why = unwritable_reason(o.out); !why.empty())
    throw CLI::ValidationError("--out", o.out + ": cannot write: " + why);
  if (!refit.empty()) {
    // The measurements of an earlier run, fitted again (by this build's fit); nothing is measured.
    const std::string text = read_file(refit, int64_t{64} << 20);
    HardwareProfile old;
    std::vector<CollectiveTiming> timings;
    try {
      old = HardwareProfile::from_json(text);
      timings = measured_timings(text);
    } catch (const Error& e) {
      DT_FAIL("dtensor calibrate --refit ", refit, ": ", e.what());
    }
    int world = 0;
    for (const CollectiveTiming& t : timings) world = std::max<int>(world, static_cast<int>(t.group_size));
    CalibrateOptions again = o;
    if (again.name.empty()) again.name = old.name;
    write_profile(timings, again, world, old.ranks_per_host, "refit of " + refit + " (" + old.description + ")");
    return;
  }
  if (o.backend == "threads") {
    std::vector<CollectiveTiming> timings;
    run_threads(o.ranks, [&](std::shared_ptr<Backend> b) {
      auto t = measure_collectives(*b, o, cpu());
      if (b->rank() == 0) timings = std::move(t);
    });
    write_profile(timings, o, o.ranks, o.ranks);
    return;
  }
  Device device = cpu();
  std::shared_ptr<Backend> backend;
  const Timeout start = std::max<Timeout>(default_timeout(), std::chrono::seconds(30));
  if (o.backend == "nccl") {
#ifdef DTENSOR_HAVE_NCCL
    int local_rank = 0;
    if (const char* lr = std::getenv("LOCAL_RANK")) DT_CHECK(absl::SimpleAtoi(lr, &local_rank), "LOCAL_RANK='", lr, "'");
    device = Device{DeviceType::kCUDA, local_rank};
    ::dtensor::cuda::check_device(device, "dtensor calibrate --backend nccl");
#else
    DT_FAIL("dtensor calibrate --backend nccl: this dtensor was built without CUDA and NCCL (no toolkit at build "
            "time, or --define=cuda=off); accepted here: threads, gloo");
#endif
  }
  DT_CHECK(launched_as_rank(), "dtensor calibrate --backend ", o.backend,
           ": ranks are processes; start them with dtensor launch -n N -- dtensor calibrate --backend ", o.backend,
           " --out ", o.out, " (or another launcher that sets RANK, WORLD_SIZE and DTENSOR_STORE)");
  const ProcessEnv env = read_process_env();
  DT_CHECK(env.world_size >= 2, "dtensor calibrate: the world has ", env.world_size,
           " rank; collectives need at least 2 (dtensor launch -n 2 or more)");
#ifdef DTENSOR_HAVE_NCCL
  backend = o.backend == "nccl" ? init_nccl_backend_from_env(start) : init_backend_from_env(start);
#else
  backend = init_backend_from_env(start);
#endif
  auto timings = measure_collectives(*backend, o, device);
  if (backend->rank() == 0) write_profile(timings, o, env.world_size, env.local_world_size);
}

}  // namespace

void add_calibrate_command(CLI::App& app) {
  auto o = std::make_shared<CalibrateOptions>();
  auto sizes = std::make_shared<std::string>("8:64M");
  auto kinds = std::make_shared<std::string>();
  auto refit = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand(
      "calibrate", "Measure the collectives on this machine and write a hardware profile for --hardware FILE");
  sub->add_option("--backend", o->backend, "threads (ranks as threads) or gloo, nccl (one rank per process, "
                                           "under dtensor launch)")
      ->capture_default_str();
  sub->add_option("--out", o->out, "hardware profile JSON to write")->required();
  sub->add_option("--ranks", o->ranks, "thread ranks (threads backend)")->capture_default_str();
  sub->add_option("--sizes", *sizes, "buffer sizes MIN:MAX in bytes (K, M, G suffixes), MIN * 4^k and MAX")
      ->capture_default_str();
  sub->add_option("--iters", o->iters, "most timed samples per size (fewer where one size would pass --budget)")
      ->capture_default_str();
  sub->add_option("--warmup", o->warmup, "untimed calls per size")->capture_default_str();
  sub->add_option("--budget", o->budget_s, "seconds one size's timed calls aim at (all rounds)")
      ->capture_default_str();
  sub->add_option("--rounds", o->rounds, "passes over every kind and size (spreads load drift over all sizes)")
      ->capture_default_str();
  sub->add_option("--kinds", *kinds, "comma-separated kinds (default: all_reduce, all_gather, reduce_scatter, "
                                     "all_to_all, broadcast, send_recv)");
  sub->add_option("--base", o->base, "profile giving compute and the inter-host link (default: cpu-tcp; "
                                     "h100-nvlink for nccl)");
  sub->add_option("--name", o->name, "name of the written profile (default: calibrated-BACKEND)");
  sub->add_option("--refit", *refit, "measure nothing: fit again the measurements a calibrated profile FILE "
                                     "keeps, and write --out");
  sub->callback([o, sizes, kinds, refit] {
    const std::vector<std::string> parts = absl::StrSplit(*sizes, ':');
    if (parts.size() != 2 || !parse_bytes(parts[0], &o->min_bytes) || !parse_bytes(parts[1], &o->max_bytes))
      throw CLI::ValidationError("--sizes", "'" + *sizes + "': expected MIN:MAX, e.g. 8:64M");
    o->kinds.clear();
    if (!kinds->empty()) o->kinds = absl::StrSplit(*kinds, ',');
    run_calibrate(*o, *refit);
  });
}

}  // namespace dtensor::tools
