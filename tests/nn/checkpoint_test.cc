// Sharded checkpoints: saved on tp=4, loaded on tp=2 and on one rank, training goes on with the same
// losses as an uninterrupted run; truncated or corrupted checkpoints are refused with a clear error.
#include <filesystem>
#include <fstream>

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "tools/train.h"

namespace dtensor::tools {
namespace {

TrainOptions small(const std::string& mesh, int steps) {
  TrainOptions o;
  o.mesh = mesh;
  o.steps = steps;
  o.batch = 4;
  o.seq = 16;
  o.dim = 32;
  o.layers = 1;
  o.heads = 4;
  o.sample_chars = 0;
  return o;
}

std::vector<double> run(const TrainOptions& o) {
  std::vector<int64_t> sizes;
  std::vector<std::string> names;
  parse_mesh(o.mesh, &sizes, &names);
  int world = 1;
  for (auto s : sizes) world *= static_cast<int>(s);
  std::vector<double> losses;
  run_threads(world, [&](std::shared_ptr<Backend> b) {
    auto r = train_rank(b, o, nullptr);
    if (b->rank() == 0) losses = r.losses;
  });
  return losses;
}

std::string tmpdir(const std::string& name) {
  auto d = std::filesystem::temp_directory_path() / ("dtensor_ckpt_" + name + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

TEST(Checkpoint, ResumesOnAnyMeshWithTheSameLosses) {
  const std::string dir = tmpdir("resume");
  auto uninterrupted = run(small("tp=4", 8));
  TrainOptions first = small("tp=4", 4);
  first.save = dir;
  auto a = run(first);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(a[i], uninterrupted[i], 1e-6);
  for (const char* mesh : {"tp=4", "tp=2", "tp=1", "dp=2,tp=2"}) {
    TrainOptions next = small(mesh, 4);
    next.load = dir;
    auto b = run(next);
    ASSERT_EQ(b.size(), 4u);
    for (int i = 0; i < 4; ++i)
      EXPECT_NEAR(b[i], uninterrupted[4 + i], 1e-5 * uninterrupted[4 + i]) << mesh << " step " << 5 + i;
  }
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, TruncatedOrCorruptedFilesAreRefused) {
  const std::string dir = tmpdir("bad");
  TrainOptions o = small("tp=2", 1);
  o.save = dir;
  run(o);
  TrainOptions load = small("tp=2", 1);
  load.load = dir;
  auto expect_error = [&](const std::string& what) {
    try {
      run(load);
      ADD_FAILURE() << "a " << what << " checkpoint was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank1.bin"), std::string::npos) << e.what();
    }
  };
  const std::string shard = dir + "/rank1.bin";
  std::string bytes;
  {
    std::ifstream in(shard, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  {  // flip one byte near the end (inside the data)
    std::string bad = bytes;
    bad[bad.size() - 3] ^= 0x5a;
    std::ofstream(shard, std::ios::binary | std::ios::trunc) << bad;
  }
  expect_error("corrupted");
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 100);
  expect_error("truncated");
  std::ofstream(shard, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_NO_THROW(run(load));
  std::filesystem::remove(dir + "/metadata.json");
  try {
    run(load);
    ADD_FAILURE() << "a checkpoint without metadata was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing metadata.json"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dtensor::tools
