// For the checkpoint kill test: saves generation GEN of the checkpoint fixture into DIR from two thread
// ranks. It writes a marker byte to stdout before the save ('S'), at each step of the commit protocol
// (see save_checkpoint's hook: v r m l c x) and after it ('D'), and sleeps DELAY_US after each step, so that
// the test's SIGKILL lands at chosen points. With FSIZE it saves under RLIMIT_FSIZE = FSIZE bytes with
// SIGXFSZ ignored (as under `ulimit -f`): writes past it fail with EFBIG.
// Usage: checkpoint_save_helper DIR GEN DELAY_US [FSIZE]. Exit 0: saved; 1: dtensor::Error (its message
// on stdout after 'E'); 2: usage.
#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <map>
#include <string>

#include "nn/checkpoint.h"
#include "tests/nn/checkpoint_fixture.h"

namespace {

void emit(const std::string& s) {
  for (size_t done = 0; done < s.size();) {
    ssize_t n = ::write(1, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    emit("usage: checkpoint_save_helper DIR GEN DELAY_US [FSIZE]\n");
    return 2;
  }
  const std::string dir = argv[1];
  const int64_t gen = std::atoll(argv[2]);
  const useconds_t delay = static_cast<useconds_t>(std::atol(argv[3]));
  if (argc == 5) {
    std::signal(SIGXFSZ, SIG_IGN);
    const rlim_t limit = static_cast<rlim_t>(std::atoll(argv[4]));
    rlimit r{limit, limit};
    if (::setrlimit(RLIMIT_FSIZE, &r) != 0) return 2;
  }
  static const std::map<std::string, char> marker = {{"version-dir", 'v'}, {"rank-file", 'r'}, {"metadata", 'm'},
                                                     {"latest-tmp", 'l'},  {"commit", 'c'},    {"cleanup", 'x'}};
  dtensor::nn::set_save_hook_for_testing([&](const std::string& step, int) {
    emit(std::string(1, marker.at(step)));
    if (delay > 0) ::usleep(delay);
  });
  emit("S");
  try {
    dtensor::nn::testing::save_fixture(dir, gen, 2);
  } catch (const dtensor::Error& e) {
    emit(std::string("E") + e.what() + "\n");
    return 1;
  }
  emit("D");
  return 0;
}
