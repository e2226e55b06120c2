// The `dtensor` command line. Each subcommand registers itself from its own file
// (tools/subcommands.h). Every way out goes through main's one error path: a usage error (a flag or
// value CLI11 or a subcommand rejects) exits 2, any other failure exits 1, each with one line
// `dtensor: error: ...`; nothing leaves by a signal.
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "kernels/cpu/blas_core.h"
#include "tools/subcommands.h"

namespace {

int run(int argc, char** argv) {
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
  dtensor::tools::add_calibrate_command(app);
  try {
    app.parse(parsed, argv);
  } catch (const CLI::Success& e) {  // --help and its kin: print, exit 0
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a subcommand that already reported, with its status
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    std::cerr << "dtensor: error: " << e.what() << "\nRun with --help for the accepted flags.\n";
    return dtensor::tools::kUsageExit;
  }
  return 0;
}

}  // namespace

namespace {

// A command whose output could not be written (a full disk, /dev/full, a closed pipe) failed, even
// when everything else went well.
int checked_output(int status) {
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "dtensor: error: writing the standard output failed: " << std::strerror(errno) << "\n";
    return status == 0 ? dtensor::tools::kRuntimeExit : status;
  }
  return status;
}

}  // namespace

// OpenBLAS chose its generic SSE3 kernels on a CPU it does not know (kernels/cpu/blas_core.h): run
// again, once, with $OPENBLAS_CORETYPE naming the kernels for this CPU's features. Without
// /proc/self/exe the process goes on as it is.
static void use_blas_kernels_for_this_cpu(char** argv) {
  const std::string core = dtensor::kernels::better_blas_core();
  if (core.empty() || ::setenv("OPENBLAS_CORETYPE", core.c_str(), 0) != 0) return;
  ::execv("/proc/self/exe", argv);
}

int main(int argc, char** argv) {
  use_blas_kernels_for_this_cpu(argv);
  try {
    return checked_output(run(argc, argv));
  } catch (const std::bad_alloc&) {
    std::cerr << "dtensor: error: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "dtensor: error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "dtensor: error: unknown failure\n";
  }
  return dtensor::tools::kRuntimeExit;
}
