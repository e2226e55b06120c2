// For tests that start ranks of their own binary (through the launcher) and run as workers: a
// failed check throws, naming the file, line and condition (the worker prints it and exits 1), and
// the path of the running binary to start again.
#pragma once

#include <unistd.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

#define WCHECK(cond, ...)                                                                        \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      throw std::runtime_error(                                                                  \
          absl::StrCat(__FILE__, ":", __LINE__, ": check failed: ", #cond, " ", ##__VA_ARGS__)); \
    }                                                                                            \
  } while (0)

namespace dtensor::rank_worker {

// This process's executable (/proc/self/exe resolved), or "/proc/self/exe" when unreadable.
inline std::string self_exe() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n <= 0 ? std::string("/proc/self/exe") : std::string(buf, static_cast<size_t>(n));
}

}  // namespace dtensor::rank_worker
