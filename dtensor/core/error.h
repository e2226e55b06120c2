// The one error model of dtensor: every failure is a dtensor::Error (a std::runtime_error)
// whose message names the operation, the shapes/placements involved, and what would be accepted.
#pragma once

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

namespace dtensor {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(printable(what)) {}

  // A NUL inside a message (from a user's string: JSON's "\u0000") would end what() early and hide
  // the rest of the message: it is spelled out instead.
  static std::string printable(const std::string& what) {
    if (what.find('\0') == std::string::npos) return what;
    std::string out;
    for (char c : what) {
      if (c == '\0') out += "\\u0000";
      else out += c;
    }
    return out;
  }
};

// A collective or rendezvous that did not complete within its timeout, or whose peer died.
class CommError : public Error {
 public:
  explicit CommError(const std::string& what) : Error(what) {}
};

}  // namespace dtensor

// DT_CHECK(cond, parts...): throws dtensor::Error(StrCat(parts...)) when cond is false.
#define DT_CHECK(cond, ...)                                    \
  do {                                                         \
    if (!(cond)) throw ::dtensor::Error(::absl::StrCat(__VA_ARGS__)); \
  } while (0)

#define DT_FAIL(...) throw ::dtensor::Error(::absl::StrCat(__VA_ARGS__))
