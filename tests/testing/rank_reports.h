// For tests that launch ranks of their own binary (rank_worker.h): where a failed worker writes
// its report, and how the driver reads the reports and the ranks' exits back into a test message.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/launcher.h"

namespace dtensor::rank_worker {

// Worker side: prints "rank R, scenario S: what" and writes it to <$report_var>/rank<R>.txt when
// the driver set that variable.
inline void report_failure(const char* report_var, int rank, const std::string& scenario,
                           const std::string& what) {
  const std::string line = absl::StrCat("rank ", rank, ", scenario ", scenario, ": ", what);
  std::fprintf(stderr, "%s\n", line.c_str());
  if (const char* dir = std::getenv(report_var)) std::ofstream(absl::StrCat(dir, "/rank", rank, ".txt")) << line << "\n";
}

// Bazel's per-test temporary directory, or /tmp.
inline std::string tmp_root() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t ? t : "/tmp";
}

// A fresh directory <tmp_root>/<prefix>XXXXXX for the workers' reports (tmp_root if it cannot be made).
inline std::string report_dir(const std::string& prefix) {
  std::string dir = absl::StrCat(tmp_root(), "/", prefix, "XXXXXX");
  if (mkdtemp(dir.data()) == nullptr) return tmp_root();
  return dir;
}

// A file's whole text; "" when it cannot be read.
inline std::string read_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return "";
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// "rank 0: code 0 signal 0; rank 1: code 1 signal 0 (terminated); ..."
inline std::string exits_str(const tools::LaunchResult& r) {
  std::vector<std::string> parts;
  for (const auto& x : r.ranks)
    parts.push_back(absl::StrCat("rank ", x.rank, ": code ", x.exit_code, " signal ", x.signal,
                                 x.terminated ? " (terminated)" : ""));
  return absl::StrJoin(parts, "; ");
}

// What the workers of `dir` reported, one line per failed rank of `world`.
inline std::string reports_str(const std::string& dir, int world) {
  std::string out;
  for (int r = 0; r < world; ++r) {
    const std::string s = read_file(absl::StrCat(dir, "/rank", r, ".txt"));
    if (!s.empty()) absl::StrAppend(&out, "\n  ", s);
  }
  return out.empty() ? std::string("\n  (no worker report)") : out;
}

}  // namespace dtensor::rank_worker
