// Runs a fuzz target over Mutator inputs with a hang watchdog, and reports the counts that
// docs/RELIABILITY.md records: inputs tried, accepted, rejected with an error, failures, slowest.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dtensor/core/error.h"
#include "tests/fuzz/mutator.h"

namespace dtensor::fuzz {

// What a target did with one input.
enum class Outcome { kAccepted, kRejected, kFailed };

struct Counts {
  int64_t inputs = 0, accepted = 0, rejected = 0, failed = 0;
  double slowest_ms = 0;
  std::string first_failure;
};

// For targets whose contract is "accept the input, or throw dtensor::Error saying what is wrong":
// runs `accept` (kAccepted, or kFailed with `why` from a check of its own), counting a
// dtensor::Error as kRejected and any other exception as a failure.
inline Outcome accept_or_error(const std::function<Outcome(std::string* why)>& accept, std::string* why) {
  try {
    return accept(why);
  } catch (const Error&) {
    return Outcome::kRejected;
  } catch (const std::exception& e) {
    *why = std::string("not a dtensor::Error: ") + e.what();
    return Outcome::kFailed;
  }
}

// Inputs per run: $DTENSOR_FUZZ_RUNS, else `fallback`.
inline int64_t fuzz_runs(int64_t fallback) {
  const char* e = std::getenv("DTENSOR_FUZZ_RUNS");
  if (e == nullptr) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(e, &end, 10);
  return end != e && *end == '\0' && v > 0 ? v : fallback;
}

// Lines of a JSON-lines file, or the whole file as one entry when `whole` is set.
inline std::vector<std::string> read_corpus(const std::vector<std::string>& paths, bool whole) {
  std::vector<std::string> out;
  for (const std::string& p : paths) {
    std::ifstream in(p);
    if (!in) continue;
    if (whole) {
      std::stringstream s;
      s << in.rdbuf();
      out.push_back(s.str());
      continue;
    }
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) out.push_back(line);
  }
  return out;
}

// Runs `target` on `runs` inputs. A watchdog ends the process, printing the input, when one input
// takes longer than `hang_limit` (a hang is a finding, and the test must not sit until Bazel's
// timeout). A target reports failures by returning kFailed with a message in `why`.
inline Counts run_fuzz(const char* name, Mutator& m, int64_t runs,
                       const std::function<Outcome(const std::string&, std::string* why)>& target,
                       std::chrono::seconds hang_limit = std::chrono::seconds(60)) {
  Counts c;
  std::mutex mu;
  std::string current;
  std::atomic<int64_t> started_ns{0};
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      const int64_t s = started_ns.load();
      const int64_t now = std::chrono::steady_clock::now().time_since_epoch().count();
      if (s != 0 && now - s > std::chrono::nanoseconds(hang_limit).count()) {
        std::lock_guard<std::mutex> l(mu);
        std::cerr << "fuzz " << name << ": HANG (over " << hang_limit.count() << " s) on input: " << current
                  << std::endl;
        std::_Exit(3);
      }
    }
  });
  // The watchdog is joined on every way out (an exception from the mutator or the target's check).
  struct Join {
    std::atomic<bool>& done;
    std::thread& t;
    ~Join() {
      done.store(true);
      t.join();
    }
  } join{done, watchdog};
  for (int64_t i = 0; i < runs; ++i) {
    std::string input = m.next();
    {
      std::lock_guard<std::mutex> l(mu);
      current = input;
    }
    const auto t0 = std::chrono::steady_clock::now();
    started_ns.store(t0.time_since_epoch().count());
    std::string why;
    const Outcome o = target(input, &why);
    started_ns.store(0);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    c.slowest_ms = std::max(c.slowest_ms, ms);
    ++c.inputs;
    if (o == Outcome::kAccepted) ++c.accepted;
    if (o == Outcome::kRejected) ++c.rejected;
    if (o == Outcome::kFailed) {
      ++c.failed;
      if (c.first_failure.empty()) c.first_failure = "input " + std::to_string(i) + ": " + why + "\n  " + input;
    }
  }
  std::printf("fuzz %s: %lld inputs, %lld accepted, %lld rejected with an error, %lld failures, slowest %.1f ms\n",
              name, static_cast<long long>(c.inputs), static_cast<long long>(c.accepted),
              static_cast<long long>(c.rejected), static_cast<long long>(c.failed), c.slowest_ms);
  return c;
}

}  // namespace dtensor::fuzz
