// `dtensor explain [--cases FILE] [--hardware NAME]`: answers JSON-lines requests (tools/explain.h).
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
  sub->add_option("--hardware", opt->hardware, "cost-model hardware profile")->capture_default_str();
  sub->callback([cases, opt] {
    std::ifstream file;
    if (!cases->empty()) {
      file.open(*cases);
      if (!file) {
        std::cerr << "dtensor explain: cannot open " << *cases << "\n";
        throw CLI::RuntimeError(2);
      }
    }
    std::istream& in = cases->empty() ? std::cin : file;
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::cout << explain_line(line, *opt) << "\n" << std::flush;
    }
  });
}

}  // namespace dtensor::tools
