// `dtensor explain [--cases FILE] [--hardware NAME|FILE]`: answers JSON-lines requests (dispatch/explain.h).
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <iostream>

#include "propagation/hardware.h"
#include "dispatch/explain.h"
#include "tools/subcommands.h"

namespace dtensor::tools {
namespace {

// Longest request line read (bytes); far above any request (a whole model's ops are one per line).
constexpr int64_t kMaxRequestBytes = int64_t{16} << 20;

}  // namespace

void add_explain_command(CLI::App& app) {
  auto cases = std::make_shared<std::string>();
  auto opt = std::make_shared<ExplainOptions>();
  CLI::App* sub = app.add_subcommand(
      "explain", "Show the sharding engine's decision for op calls given as JSON lines "
                 "(../shared/conformance/README.md)");
  sub->add_option("--cases", *cases, "JSON-lines file of requests (default: standard input)");
  sub->add_option("--hardware", opt->hardware, "cost-model hardware profile: a name or a JSON file (dtensor calibrate --out)")->capture_default_str();
  sub->add_option("--max-run-bytes", opt->max_run_bytes,
                  "largest memory a \"run\": true request may use, in bytes (inputs and outputs x (ranks + 2))")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-run-flops", opt->max_run_flops,
                  "largest work a \"run\": true request may do, in FLOPs (the op's forward FLOPs x (ranks + 1))")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  sub->add_option("--max-run-ranks", opt->max_run_ranks, "largest mesh a \"run\": true request may execute on")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sub->callback([cases, opt] {
    // A profile that cannot be read would make every answer an error: refuse it once, up front.
    try {
      hardware_profile(opt->hardware);
    } catch (const Error& e) {
      throw CLI::ValidationError("--hardware", e.what());
    }
    std::ifstream file;
    if (!cases->empty()) {
      std::error_code ec;
      if (std::filesystem::is_directory(*cases, ec)) {
        std::cerr << "dtensor: error: explain: --cases " << *cases
                  << " is a directory (accepted: a JSON-lines file, or standard input)\n";
        throw CLI::RuntimeError(kRuntimeExit);
      }
      file.open(*cases);
      if (!file) {
        std::cerr << "dtensor: error: explain: cannot open --cases " << *cases << "\n";
        throw CLI::RuntimeError(kRuntimeExit);
      }
    }
    std::istream& in = cases->empty() ? std::cin : file;
    // One answer per input line, blank lines included (the contract: answers line up with requests).
    // A line past kMaxRequestBytes (an endless source such as /dev/zero) ends the run with an error.
    std::string line;
    for (;;) {
      line.clear();
      bool newline = false;
      for (int c; (c = in.get()) != std::char_traits<char>::eof();) {
        if (c == '\n') {
          newline = true;
          break;
        }
        if (static_cast<int64_t>(line.size()) >= kMaxRequestBytes) {
          std::cerr << "dtensor: error: explain: request line " << "longer than " << kMaxRequestBytes
                    << " bytes (accepted: one JSON request per line, at most 16 MiB)\n";
          throw CLI::RuntimeError(kRuntimeExit);
        }
        line.push_back(static_cast<char>(c));
      }
      if (!newline && line.empty()) break;  // end of input
      std::cout << explain_line(line, *opt) << "\n" << std::flush;
      if (!newline) break;
    }
    if (in.bad()) {
      std::cerr << "dtensor: error: explain: reading the requests failed\n";
      throw CLI::RuntimeError(kRuntimeExit);
    }
  });
}

}  // namespace dtensor::tools
