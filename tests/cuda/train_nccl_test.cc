// `dtensor train --backend nccl` end to end: one process per GPU (at most 4) trains a small model in
// float64 and --check compares its losses with one rank's (tools/train.h, kCheckTolerance); a mesh of
// more ranks than GPUs is refused before any rank starts, with exit 1 and the reason. The training
// case skips without a GPU ("no CUDA device: ..."); the refusal runs everywhere.
//
// Usage (Bazel passes it): train_nccl_test PATH_TO_DTENSOR
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor {
namespace {

std::string g_dtensor;  // the dtensor binary

struct Result {
  int status = -1;  // exit status; -1 when it did not exit normally (a signal)
  std::string output;  // stdout and stderr
};

// The training text: dtensor's default, or $DTENSOR_TRAIN_TEXT (scripts/gpu_run.sh sets it to the
// bundle's copy, for machines without /usr/share/common-licenses).
std::string text_flag() {
  const char* t = std::getenv("DTENSOR_TRAIN_TEXT");
  return t && *t ? absl::StrCat(" --text '", t, "'") : "";
}

Result run_dtensor(const std::string& args) {
  Result r;
  const std::string cmd = g_dtensor + " " + args + text_flag() + " </dev/null 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int w = pclose(p);
  if (WIFEXITED(w)) r.status = WEXITSTATUS(w);
  return r;
}

constexpr char kSmallModel[] = "--steps 10 --batch 4 --seq 16 --dim 32 --layers 1 --heads 4 --sample 0 --log-every 100";

TEST(TrainNccl, MatchesOneRank) {
  DT_SKIP_WITHOUT_CUDA();
  const int gpus = cuda::device_count();
  std::vector<std::string> meshes = {absl::StrCat("--mesh tp=", std::min(gpus, 2))};
  if (gpus >= 4) meshes.push_back("--mesh dp=2,tp=2 --sequence-parallel --loss-parallel");
  for (const std::string& mesh : meshes) {
    const Result r = run_dtensor(absl::StrCat("train --backend nccl --device cuda ", mesh, " ", kSmallModel, " --check"));
    EXPECT_EQ(r.status, 0) << mesh << ":\n" << r.output;
    EXPECT_NE(r.output.find("nccl backend"), std::string::npos) << mesh << ":\n" << r.output;
    EXPECT_NE(r.output.find("(ok)"), std::string::npos) << mesh << ":\n" << r.output;
  }
}

TEST(TrainNccl, MoreRanksThanGpusFailsBeforeStarting) {
  const int gpus = cuda::device_count();
  const Result r = run_dtensor(absl::StrCat("train --backend nccl --device cuda --mesh dp=", gpus + 1, ",tp=1 ", kSmallModel));
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find(absl::StrCat("this machine has ", gpus, " GPU(s)")), std::string::npos) << r.output;
}

}  // namespace
}  // namespace dtensor

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s PATH_TO_DTENSOR\n", argv[0]);
    return 2;
  }
  dtensor::g_dtensor = argv[1];
  return RUN_ALL_TESTS();
}
