// `dtensor launch`: runs N ranks of a command on this machine (tools/launcher.h).
#include <chrono>
#include <exception>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "tools/launcher.h"
#include "tools/subcommands.h"

namespace dtensor::tools {

void add_launch_command(CLI::App& app) {
  struct Args {
    int nprocs = 1;
    double timeout_s = 0;
    double failure_grace_s = 0;
    double kill_grace_s = 5;
    int max_restarts = 0;
    bool quiet = false;
    std::vector<std::string> command;
  };
  auto args = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand(
      "launch",
      "Start N ranks of CMD on this machine, with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE "
      "and "
      "DTENSOR_STORE (a fresh file store) set; stop all of them when one fails.");
  sub->add_option("-n,--nprocs", args->nprocs, "number of ranks to start, 1 to " + std::to_string(kMaxLocalRanks))
      ->required()
      ->check(CLI::Range(1, kMaxLocalRanks));
  // Seconds up to a year, in whole milliseconds: finite, far inside std::chrono's range.
  sub->add_option("--timeout", args->timeout_s,
                  "overall limit in seconds; the ranks are terminated when it expires (0: none)")
      ->check(kSecondsOrZero);
  sub->add_option("--failure-grace", args->failure_grace_s,
                  "seconds the other ranks may run on after one fails before they are terminated")
      ->check(kSecondsOrZero);
  sub->add_option("--kill-grace", args->kill_grace_s, "seconds between SIGTERM and SIGKILL")->check(kSecondsOrZero);
  sub->add_option("--max-restarts", args->max_restarts,
                  "times a failed rank's process is started again (same rank, DTENSOR_RESTART_COUNT set) before "
                  "its failure ends the job; an elastic run lets it rejoin")
      ->check(CLI::Range(0, 1000));
  sub->add_flag("-q,--quiet", args->quiet, "print nothing of its own on stderr");
  // Without "--", everything from the first positional argument on is the command, options
  // included.
  sub->prefix_command();
  sub->footer("The command and its arguments follow the options, best after --.\n");
  sub->callback([args, sub] {
    args->command = sub->remaining();
    const auto& trailing = trailing_args();
    args->command.insert(args->command.end(), trailing.begin(), trailing.end());
    if (args->command.empty()) {
      throw CLI::RequiredError("launch: a command (dtensor launch -n N -- CMD ARGS...)");
    }
    LaunchOptions o;
    o.nprocs = args->nprocs;
    o.command = args->command;
    auto ms = [](double s) { return std::chrono::milliseconds(static_cast<int64_t>(s * 1000)); };
    o.timeout = ms(args->timeout_s);
    o.failure_grace = ms(args->failure_grace_s);
    o.kill_grace = ms(args->kill_grace_s);
    o.quiet = args->quiet;
    o.max_restarts = args->max_restarts;
    const int status = launch(o);  // failures to start throw: main reports them
    if (status != 0) throw CLI::RuntimeError(status);
  });
}

}  // namespace dtensor::tools
