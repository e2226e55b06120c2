#include "tools/subcommands.h"

namespace dtensor::tools {
namespace {
std::vector<std::string>& storage() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

const std::vector<std::string>& trailing_args() { return storage(); }
void set_trailing_args(std::vector<std::string> args) { storage() = std::move(args); }

}  // namespace dtensor::tools
