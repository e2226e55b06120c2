// `dtensor explain [--cases FILE] [--hardware NAME|FILE]`: answers JSON-lines requests (tools/explain.h).
#include <fstream>
#include <iostream>

#include "tools/explain.h"
#include "tools/subcommands.h"

namespace dtensor::tools {

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
  sub->add_option("--max-run-ranks", opt->max_run_ranks, "largest mesh a \"run\": true request may execute on")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{1}, int64_t{1024}));
  sub->callback([cases, opt] {
    std::ifstream file;
    if (!cases->empty()) {
      file.open(*cases);
      if (!file) {
        std::cerr << "dtensor: error: explain: cannot open --cases " << *cases << "\n";
        throw CLI::RuntimeError(1);
      }
    }
    std::istream& in = cases->empty() ? std::cin : file;
    // One answer per input line, blank lines included (the contract: answers line up with requests).
    std::string line;
    while (std::getline(in, line)) std::cout << explain_line(line, *opt) << "\n" << std::flush;
  });
}

}  // namespace dtensor::tools
