// The `dtensor` command line. Each subcommand registers itself from its own file
// (tools/subcommands.h).
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "tools/subcommands.h"

int main(int argc, char** argv) {
  // Cut off everything after the first "--": it belongs to the program a subcommand runs.
  int parsed = argc;
  std::vector<std::string> trailing;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      parsed = i;
      trailing.assign(argv + i + 1, argv + argc);
      break;
    }
  }
  dtensor::tools::set_trailing_args(std::move(trailing));

  CLI::App app{"dtensor: a tensor-parallel runtime"};
  app.require_subcommand(1);
  dtensor::tools::add_launch_command(app);
  dtensor::tools::add_demo_command(app);
  dtensor::tools::add_explain_command(app);
  dtensor::tools::add_plan_command(app);
  dtensor::tools::add_train_command(app);
  CLI11_PARSE(app, parsed, argv);
  return 0;
}
