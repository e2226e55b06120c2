// Subcommands of the `dtensor` command line. Each lives in its own file (launch_command.cc, ...)
// and registers itself on the root CLI11 app; dtensor_main.cc calls every add_*_command.
//
// Conventions (dtensor_main.cc holds the one error path):
//   - A flag value that is not accepted is a usage error: CLI11 validators reject it at parse time,
//     or the callback throws CLI::ValidationError("--flag", "what is accepted"); exit status 2.
//   - Any other failure throws (dtensor::Error, std::exception): `dtensor: error: <what>`, status 1.
//   - A callback that already reported reports its own non-zero status by throwing
//     CLI::RuntimeError(status).
//   - Everything after the first "--" of the command line is not parsed by CLI11: dtensor_main.cc
//     cuts it off and a subcommand that runs another program reads it with trailing_args().
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace dtensor::tools {

inline constexpr int kUsageExit = 2;
inline constexpr int kRuntimeExit = 1;

// Bounds on `dtensor plan`'s model sizes: far above real configurations (Llama-3 405B has 126
// layers; 16M tokens of context), low enough that every derived tensor size fits the engine's limits
// or is refused by them with an error.
inline constexpr int64_t kMaxPlanBatch = int64_t{1} << 24;
inline constexpr int64_t kMaxPlanSeq = int64_t{1} << 24;
inline constexpr int kMaxPlanLayers = 4096;

// CLI11 validator: a finite number > 0 (CLI::PositiveNumber lets nan through).
inline const CLI::Validator kPositiveFinite(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !(v > 0) || !std::isfinite(v)) return "must be a finite number > 0, got " + s;
      return {};
    },
    "POSITIVE");

// CLI11 validator: a finite number (CLI::Range lets nan through: every comparison with it is false).
inline const CLI::Validator kFinite(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v)) return "must be a finite number, got " + s;
      return {};
    },
    "FINITE");

// CLI11 validator: seconds that become whole milliseconds: 0 (none) or 0.001 up to a year, finite
// (1e-300 would otherwise round to 0, which means none).
inline const CLI::Validator kSecondsOrZero(
    [](std::string& s) -> std::string {
      double v = 0;
      if (!CLI::detail::lexical_cast(s, v) || !std::isfinite(v) || v < 0 || (v > 0 && v < 0.001) ||
          v > 365.0 * 86400)
        return "must be 0 (none) or 0.001 to 31536000 seconds, got " + s;
      return {};
    },
    "SECONDS");

// The arguments after the first "--" (empty when there was none), verbatim.
const std::vector<std::string>& trailing_args();
// Called by main before parsing.
void set_trailing_args(std::vector<std::string> args);

// `dtensor launch -n N [--timeout S] [--failure-grace S] [--kill-grace S] -- CMD ARGS...`: starts N
// local ranks of CMD (see tools/launcher.h); the exit status is the launcher's.
void add_launch_command(CLI::App& app);

// `dtensor demo [--backend gloo|threads] [--shape 9,5] [--timeout S]`: the foundation's main job
// (tools/demo_command.cc): distribute and redistribute a tensor on a 2x2 mesh of 4 ranks.
void add_demo_command(CLI::App& app);

// `dtensor explain [--cases FILE] [--hardware NAME|FILE]` (tools/explain_command.cc).
void add_explain_command(CLI::App& app);

// `dtensor plan --model NAME --mesh dp=8,tp=8 [...]`: offline whole-model sharding plan
// (tools/plan_command.cc, planner/command.h).
void add_plan_command(CLI::App& app);

// `dtensor calibrate --backend threads|gloo|nccl --out FILE [...]`: measures the collectives and
// writes a hardware profile (tools/calibrate_command.cc, tools/calibrate.h).
void add_calibrate_command(CLI::App& app);

// `dtensor train [--mesh tp=4] [--backend threads|gloo] [--check] ...` (tools/train_command.cc).
void add_train_command(CLI::App& app);

}  // namespace dtensor::tools
