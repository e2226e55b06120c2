// Sharded checkpoints: saved on tp=4, loaded on tp=2 and on one rank, training goes on with the same
// losses as an uninterrupted run; a save that fails or is killed at any point leaves the old or the new
// checkpoint, whole and bit-exact; hostile rank files, metadata and LATEST are refused with an error
// naming the file; `dtensor train --save` finds an unwritable directory before training.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>

#include "dtensor/collectives/threads_backend.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "nn/checkpoint.h"
#include "tests/nn/checkpoint_fixture.h"
#include "tools/train.h"

extern char** environ;

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

// Under Bazel's per-test TEST_TMPDIR: sandboxed runs share /tmp and may share a pid.
std::string tmpdir(const std::string& name) {
  const char* test_tmp = std::getenv("TEST_TMPDIR");
  const std::filesystem::path base = test_tmp != nullptr ? test_tmp : std::filesystem::temp_directory_path();
  auto d = base / ("dtensor_ckpt_" + name + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  return d.string();
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The version directory LATEST names.
std::string latest_version_dir(const std::string& dir) {
  std::string v = slurp(dir + "/LATEST");
  if (!v.empty() && v.back() == '\n') v.pop_back();
  return dir + "/" + v;
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

// Weighted shards (DESIGN §2) reshard through checkpoints: saved weighted, loaded even, weighted with
// other weights or on one rank, and saved even, loaded weighted; every load is bit-exact.
TEST(Checkpoint, ReshardsBetweenWeightedAndEvenLayouts) {
  const std::string dir = tmpdir("weighted");
  Tensor full = Tensor::arange(66).to(DType::kFloat64).view({11, 6});
  auto save_on = [&](const Shape& mesh, const Placements& pl, int64_t step) {
    run_threads(static_cast<int>(numel(mesh)), [&](std::shared_ptr<Backend> b) {
      DTensor t = distribute_tensor(full, DeviceMesh::create(b, mesh), pl);
      nn::save_checkpoint(dir, {{"w", &t}}, step);
    });
  };
  auto load_on = [&](const Shape& mesh, const Placements& pl) {
    Tensor got;
    run_threads(static_cast<int>(numel(mesh)), [&](std::shared_ptr<Backend> b) {
      auto m = DeviceMesh::create(b, mesh);
      DTensor t = distribute_tensor(Tensor::zeros({11, 6}, DType::kFloat64), m, pl);
      nn::load_checkpoint(dir, {{"w", &t}});
      EXPECT_EQ(t.local_tensor().sizes(), t.spec().local_shape()) << placements_str(pl);
      Tensor f = t.full_tensor();
      if (b->rank() == 0) got = f;
    });
    return got;
  };
  save_on({4}, {Shard(0, {3, 1, 2, 1})}, 1);
  EXPECT_TRUE(equal(load_on({3}, {Shard(0)}), full));
  EXPECT_TRUE(equal(load_on({2}, {Shard(1, {1, 2})}), full));
  EXPECT_TRUE(equal(load_on({1}, {Replicate()}), full));
  EXPECT_TRUE(equal(load_on({2, 2}, {Shard(0, {1, 3}), Shard(0, {2, 1})}), full));
  save_on({2, 2}, {Shard(1), Shard(0)}, 2);
  EXPECT_TRUE(equal(load_on({4}, {Shard(0, {1, 1, 5, 2})}), full));
  EXPECT_TRUE(equal(load_on({2, 2}, {Shard(0, {3, 1}), Shard(1, {1, 2})}), full));
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
  const std::string shard = latest_version_dir(dir) + "/rank1.bin";
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
  std::filesystem::remove(latest_version_dir(dir) + "/metadata.json");
  try {
    run(load);
    ADD_FAILURE() << "a checkpoint without metadata was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("metadata.json: No such file"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

// ---- The crash-safe layout: fixtures saved from thread ranks, loaded onto one rank, compared bit-exact.

using json = nlohmann::json;
using nn::testing::fixture_values;
using nn::testing::load_fixture;
using nn::testing::same_bits;
using nn::testing::save_fixture;

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

int count_versions(const std::string& dir) {
  int n = 0;
  for (const auto& e : entries(dir)) n += e.rfind("ckpt-", 0) == 0;
  return n;
}

// Loads `dir` and checks it is generation `gen`, bit-exact.
void expect_loads(const std::string& dir, int64_t gen) {
  int64_t step = -1;
  std::map<std::string, Tensor> got;
  try {
    got = load_fixture(dir, &step);
  } catch (const Error& e) {
    ADD_FAILURE() << "expected generation " << gen << " to load: " << e.what();
    return;
  }
  EXPECT_EQ(step, gen);
  EXPECT_TRUE(same_bits(got, fixture_values(gen))) << "generation " << gen << " does not load bit-exact";
}

// Expects `f` to throw a dtensor::Error whose message contains every one of `parts`.
void expect_error(const std::function<void()>& f, const std::vector<std::string>& parts, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << what << ": no error";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << what << ": '" << p << "' not in: " << e.what();
  }
}

void expect_load_error(const std::string& dir, const std::vector<std::string>& parts, const std::string& what) {
  int64_t step;
  expect_error([&] { load_fixture(dir, &step); }, parts, what);
}

TEST(Checkpoint, SavesAVersionDirectoryNamedByLatest) {
  const std::string dir = tmpdir("layout");
  save_fixture(dir, 1, 2);
  expect_loads(dir, 1);
  save_fixture(dir, 2, 3);  // over it, from another mesh size
  expect_loads(dir, 2);
  const auto names = entries(dir);
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0], "LATEST");
  EXPECT_EQ(names[1].rfind("ckpt-2-", 0), 0u) << names[1];
  EXPECT_EQ(entries(latest_version_dir(dir)), (std::vector<std::string>{"metadata.json", "rank0.bin", "rank1.bin",
                                                                          "rank2.bin"}));
  std::filesystem::remove_all(dir);
}

// Two saves into one directory at once: the second is refused while the first holds the directory's
// lock, and the first's checkpoint stays loadable (without the lock, each save's cleanup deleted the
// other's version and LATEST named a removed folder).
TEST(Checkpoint, ASecondSaveIntoTheSameDirectoryIsRefusedWhileOneRuns) {
  const std::string dir = tmpdir("concurrent");
  save_fixture(dir, 1, 2);
  bool inner_ran = false;
  nn::set_save_hook_for_testing([&](const std::string& s, int rank) {
    if (s != "rank-file" || rank != 0 || inner_ran) return;
    inner_ran = true;
    // A save from another process, while this one holds the lock (flock is per open file description,
    // so a second open in this process contends like another process would).
    expect_error([&] { save_fixture(dir, 3, 1); }, {"another save into", dir, "in progress"}, "concurrent save");
  });
  save_fixture(dir, 2, 2);
  nn::set_save_hook_for_testing(nullptr);
  EXPECT_TRUE(inner_ran);
  expect_loads(dir, 2);
  EXPECT_EQ(count_versions(dir), 1);
  save_fixture(dir, 4, 2);  // the lock is released with the save
  expect_loads(dir, 4);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, LoadsAndReplacesTheFlatLayoutOfEarlierVersions) {
  const std::string dir = tmpdir("flat");
  save_fixture(dir, 1, 2);
  const std::string v = latest_version_dir(dir);
  for (const auto& n : entries(v)) std::filesystem::rename(v + "/" + n, dir + "/" + n);
  std::filesystem::remove(v);
  std::filesystem::remove(dir + "/LATEST");
  expect_loads(dir, 1);
  save_fixture(dir, 2, 2);
  expect_loads(dir, 2);
  EXPECT_EQ(entries(dir).size(), 2u) << "the flat files stay after a save over them";
  std::filesystem::remove_all(dir);
}

// A rank file split into its header (as JSON) and its data section.
struct RankFile {
  json header;
  std::string data;
};

RankFile read_rank_file(const std::string& path) {
  const std::string bytes = slurp(path);
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  return {json::parse(bytes.substr(16, hlen)), bytes.substr(16 + hlen)};
}

void write_rank_file(const std::string& path, const std::string& header, const std::string& data) {
  const uint64_t hlen = header.size();
  spit(path, "DTCKPT1\n" + std::string(reinterpret_cast<const char*>(&hlen), 8) + header + data);
}

TEST(Checkpoint, CraftedBlockSizesAreRefusedNamingTheFile) {
  const std::string dir = tmpdir("crafted");
  save_fixture(dir, 1, 2);
  const std::string shard = latest_version_dir(dir) + "/rank0.bin";
  const RankFile orig = read_rank_file(shard);
  // Rank 0's blocks: w f32[128, 192] at [0, 0], b f32[192], e, n, u.
  ASSERT_EQ(orig.header["blocks"][0]["name"], "w");
  ASSERT_EQ(orig.header["blocks"][1]["name"], "b");
  const uint64_t kMax = UINT64_MAX;
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"nbytes larger than the shape", [](json& h) { h["blocks"][0]["nbytes"] = 128 * 192 * 4 + 8; }, "claims"},
      {"nbytes smaller than the shape", [](json& h) { h["blocks"][0]["nbytes"] = 128 * 192 * 4 - 8; }, "claims"},
      {"nbytes near 2^64", [&](json& h) { h["blocks"][0]["nbytes"] = kMax - 7; }, "claims"},
      {"begin + nbytes wraps", [&](json& h) { h["blocks"][0]["begin"] = kMax - 3; }, "truncated"},
      {"begin past the data", [&](json& h) { h["blocks"][1]["begin"] = orig.data.size(); }, "truncated"},
      {"numel overflows", [](json& h) { h["blocks"][0]["shape"] = {int64_t{1} << 40, int64_t{1} << 40}; }, "overflows"},
      {"bytes wrap to nbytes", [](json& h) { h["blocks"][1]["shape"] = {(int64_t{1} << 62) + 192}; }, "overflows"},
      {"negative dim", [](json& h) { h["blocks"][0]["shape"] = {-1, 192}; }, "non-negative"},
      {"fractional dim", [](json& h) { h["blocks"][0]["shape"] = {128.5, 192}; }, "non-negative integers"},
      {"offset outside the tensor", [](json& h) { h["blocks"][0]["offset"] = {1000, 0}; }, "outside the global shape"},
      {"offset near 2^63", [](json& h) { h["blocks"][0]["offset"] = {INT64_MAX, 0}; }, "outside the global shape"},
      {"offset of another rank's block", [](json& h) { h["blocks"][0]["offset"] = {128, 0}; }, "overlaps"},
      {"offset of the wrong rank", [](json& h) { h["blocks"][0]["offset"] = {0}; }, "one offset per dim"},
      {"unknown dtype", [](json& h) { h["blocks"][0]["dtype"] = "float128"; }, "unknown dtype"},
      {"dtype not the metadata's", [](json& h) { h["blocks"][0]["dtype"] = "int32"; }, "the metadata says"},
      {"nbytes a string", [](json& h) { h["blocks"][0]["nbytes"] = "abc"; }, "'blocks[0].nbytes' must be"},
      {"begin negative", [](json& h) { h["blocks"][0]["begin"] = -16; }, "'blocks[0].begin' must be"},
      {"shape a number", [](json& h) { h["blocks"][0]["shape"] = 3; }, "'blocks[0].shape' must be an array"},
      {"name a number", [](json& h) { h["blocks"][0]["name"] = 5; }, "'blocks[0].name' must be a string"},
      {"checksum missing", [](json& h) { h["blocks"][2].erase("checksum"); }, "'blocks[2].checksum' is missing"},
      {"block not an object", [](json& h) { h["blocks"][0] = 7; }, "must be a JSON object"},
      {"blocks not an array", [](json& h) { h["blocks"] = "x"; }, "'blocks' must be an array"},
      {"header not an object", [](json& h) { h = json::array(); }, "must be a JSON object"},
      {"block listed twice", [](json& h) { h["blocks"].push_back(h["blocks"][1]); }, "more than one block"},
      {"block of an unknown tensor", [](json& h) { h["blocks"][1]["name"] = "zz"; }, "does not list"},
  };
  for (const Case& c : cases) {
    json h = orig.header;
    c.edit(h);
    write_rank_file(shard, h.dump(), orig.data);
    expect_load_error(dir, {"rank0.bin", c.expected}, c.what);
  }
  std::string deep(100000, '[');  // nesting that would exhaust a recursive reader's stack
  write_rank_file(shard, deep + std::string(100000, ']'), orig.data);
  expect_load_error(dir, {"rank0.bin", "nested deeper"}, "deep nesting");
  write_rank_file(shard, orig.header.dump(), orig.data);
  expect_loads(dir, 1);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, EveryFlippedHeaderByteIsRefusedNamingTheFile) {
  const std::string dir = tmpdir("flip");
  save_fixture(dir, 1, 2);
  const std::string shard = latest_version_dir(dir) + "/rank0.bin";
  const std::string bytes = slurp(shard);
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  int refused = 0;
  for (size_t i = 0; i < 16 + hlen; ++i) {
    for (unsigned char mask : {0x01, 0x20, 0x80}) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      spit(shard, bad);
      int64_t step;
      try {
        load_fixture(dir, &step);
        ADD_FAILURE() << "byte " << i << " ^ " << int(mask) << " was accepted";
      } catch (const Error& e) {
        ++refused;
        if (std::string(e.what()).find("rank0.bin") == std::string::npos)
          ADD_FAILURE() << "byte " << i << " ^ " << int(mask) << ": the error does not name the file: " << e.what();
      }
    }
  }
  EXPECT_EQ(refused, 3 * (16 + static_cast<int>(hlen)));
  spit(shard, bytes);
  expect_loads(dir, 1);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, TruncatedRankFilesAreRefusedNamingTheFile) {
  const std::string dir = tmpdir("trunc");
  save_fixture(dir, 1, 2);
  const std::string shard = latest_version_dir(dir) + "/rank1.bin";
  const std::string bytes = slurp(shard);
  uint64_t hlen;
  std::memcpy(&hlen, bytes.data() + 8, 8);
  for (size_t n : {size_t{0}, size_t{5}, size_t{8}, size_t{15}, size_t{16}, 16 + hlen / 2, 15 + hlen, 16 + hlen,
                   17 + hlen, bytes.size() / 2, bytes.size() - 1}) {
    spit(shard, bytes.substr(0, n));
    expect_load_error(dir, {"rank1.bin"}, "truncated to " + std::to_string(n) + " bytes");
  }
  std::filesystem::remove(shard);
  expect_load_error(dir, {"rank1.bin", "No such file"}, "missing rank file");
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, CorruptedMetadataAndLatestAreRefusedNamingTheFile) {
  const std::string dir = tmpdir("meta");
  expect_load_error(dir, {"no checkpoint at", dir}, "no directory");
  save_fixture(dir, 1, 2);
  const std::string meta_path = latest_version_dir(dir) + "/metadata.json";
  const json meta = json::parse(slurp(meta_path));
  struct Case {
    const char* what;
    std::function<void(json&)> edit;
    const char* expected;
  };
  const std::vector<Case> cases = {
      {"step a string", [](json& m) { m["step"] = "x"; }, "'step' must be an integer"},
      {"negative rank", [](json& m) { m["ranks"] = {0, -1}; }, "'ranks' must be"},
      {"ranks missing", [](json& m) { m.erase("ranks"); }, "'ranks' is missing"},
      {"shape a string", [](json& m) { m["tensors"][0]["shape"] = "abc"; }, "'tensors[0].shape' must be an array"},
      {"dtype unknown", [](json& m) { m["tensors"][1]["dtype"] = "float8"; }, "'tensors[1].dtype'"},
      {"tensor listed twice", [](json& m) { m["tensors"].push_back(m["tensors"][0]); }, "listed twice"},
      {"another format", [](json& m) { m["format"] = "other"; }, "not a dtensor checkpoint"},
  };
  for (const Case& c : cases) {
    json m = meta;
    c.edit(m);
    spit(meta_path, m.dump());
    expect_load_error(dir, {"metadata.json", c.expected}, c.what);
  }
  spit(meta_path, "{\"format\": ");
  expect_load_error(dir, {"metadata.json", "invalid JSON"}, "metadata cut short");
  spit(meta_path, meta.dump());
  expect_loads(dir, 1);
  const std::string latest = slurp(dir + "/LATEST");
  spit(dir + "/LATEST", "../../../etc\n");
  expect_load_error(dir, {"LATEST", "expected a version name"}, "LATEST outside the directory");
  spit(dir + "/LATEST", "ckpt-7-0123456789abcdef\n");
  expect_load_error(dir, {"ckpt-7-0123456789abcdef/metadata.json", "No such file"}, "LATEST names no version");
  spit(dir + "/LATEST", latest);
  expect_loads(dir, 1);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, AFailedSaveLeavesThePreviousCheckpoint) {
  const std::string dir = tmpdir("fail");
  save_fixture(dir, 1, 2);
  // An injected failure at each step before the commit, on one rank: every rank throws it.
  for (const char* step : {"version-dir", "rank-file", "metadata", "latest-tmp"}) {
    nn::set_save_hook_for_testing([&](const std::string& s, int rank) {
      if (s == step && rank == (s == "rank-file" ? 1 : 0)) DT_FAIL("injected failure at ", s);
    });
    expect_error([&] { save_fixture(dir, 2, 2); }, {std::string("injected failure at ") + step},
                 std::string("failure at ") + step);
    nn::set_save_hook_for_testing(nullptr);
    expect_loads(dir, 1);
    EXPECT_EQ(count_versions(dir), 1) << "the failed save's version directory stays after a failure at " << step;
  }
  // A real write error on rank 1: its rank file's name is taken by a directory.
  nn::set_save_hook_for_testing([&](const std::string& s, int) {
    if (s != "version-dir") return;
    const std::string old = latest_version_dir(dir);
    for (const auto& n : entries(dir))
      if (n.rfind("ckpt-", 0) == 0 && dir + "/" + n != old) std::filesystem::create_directory(dir + "/" + n + "/rank1.bin");
  });
  expect_error([&] { save_fixture(dir, 2, 2); }, {"rank1.bin", "File exists", "(on rank 1)"}, "rank file taken");
  nn::set_save_hook_for_testing(nullptr);
  expect_loads(dir, 1);
  std::filesystem::remove_all(dir);
}

// ---- The save helper as a child process (tests/nn/checkpoint_save_helper.cc), to kill or to limit.

std::string helper_path() {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir != nullptr && ws != nullptr) return std::string(srcdir) + "/" + ws + "/tests/nn/checkpoint_save_helper";
  return "tests/nn/checkpoint_save_helper";
}

struct Child {
  pid_t pid = -1;
  int out = -1;  // the read end of its stdout
};

Child spawn_helper(const std::vector<std::string>& args) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, p[1], 1);
  const std::string path = helper_path();
  std::vector<std::string> all = {path};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  Child c;
  const int rc = posix_spawn(&c.pid, path.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(p[1]);
  if (rc != 0) {
    ::close(p[0]);
    throw std::runtime_error("posix_spawn " + path + ": " + std::strerror(rc));
  }
  c.out = p[0];
  return c;
}

int read_byte(int fd) {
  unsigned char ch;
  ssize_t n;
  do n = ::read(fd, &ch, 1);
  while (n < 0 && errno == EINTR);
  return n == 1 ? ch : -1;
}

std::string read_rest(int fd) {
  std::string s;
  for (int ch; (ch = read_byte(fd)) >= 0;) s.push_back(static_cast<char>(ch));
  return s;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

TEST(Checkpoint, ASaveOverTheFileSizeLimitFailsAndLeavesThePreviousCheckpoint) {
  // `ulimit -f` with SIGXFSZ ignored: the rank files (about 100 KB) hit the 32 KB limit.
  const std::string dir = tmpdir("fsize");
  save_fixture(dir, 1, 2);
  Child c = spawn_helper({dir, "2", "0", "32768"});
  const std::string out = read_rest(c.out);
  ::close(c.out);
  const int status = wait_for(c.pid);
  ASSERT_TRUE(WIFEXITED(status)) << out;
  EXPECT_EQ(WEXITSTATUS(status), 1) << out;
  EXPECT_NE(out.find(".bin failed: File too large"), std::string::npos) << out;
  expect_loads(dir, 1);
  save_fixture(dir, 2, 2);
  expect_loads(dir, 2);
  EXPECT_EQ(count_versions(dir), 1);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, KilledSavesLeaveTheOldOrTheNewCheckpoint) {
  // 50 saves of generation g+1 over g, each SIGKILLed at a random point: after waiting for a random
  // number of the helper's step markers (S v r r m l c x D; it sleeps kDelayUs after each), plus a
  // random delay. The directory must then load as g or g+1, bit-exact, and as g+1 once 'c' (after the
  // commit rename) was seen.
  const std::string dir = tmpdir("kill");
  save_fixture(dir, 0, 2);
  constexpr int kRuns = 50, kDelayUs = 3000, kMarkers = 9;
  std::mt19937 rng(20240611);
  int64_t current = 0;
  int killed_old = 0, killed_new = 0, finished = 0, with_leftovers = 0;
  std::map<char, int> last_marker;  // where the kills landed: after the child's last marker ('-': none)
  for (int i = 0; i < kRuns; ++i) {
    const int64_t next = current + 1;
    const std::vector<std::string> before = entries(dir);
    Child c = spawn_helper({dir, std::to_string(next), std::to_string(kDelayUs)});
    const int wait_markers = std::uniform_int_distribution<int>(0, kMarkers - 1)(rng);
    std::string seen;
    for (int k = 0; k < wait_markers; ++k) {
      const int ch = read_byte(c.out);
      if (ch < 0) break;
      seen.push_back(static_cast<char>(ch));
    }
    ::usleep(std::uniform_int_distribution<int>(0, kDelayUs * 3 / 2)(rng));
    ::kill(c.pid, SIGKILL);
    const int status = wait_for(c.pid);
    const std::string rest = read_rest(c.out);
    ::close(c.out);
    const bool killed = WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    const std::string all = seen + rest;
    ++last_marker[all.empty() ? '-' : all.back()];
    if (!killed) {
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "helper failed: " << seen << rest;
      ++finished;
    }
    // A killed save's version directory that the load must skip.
    for (const auto& n : entries(dir))
      if (n.rfind("ckpt-", 0) == 0 && dir + "/" + n != latest_version_dir(dir) &&
          std::find(before.begin(), before.end(), n) == before.end()) {
        ++with_leftovers;
        break;
      }
    int64_t step = -1;
    std::map<std::string, Tensor> got;
    try {
      got = load_fixture(dir, &step);
    } catch (const Error& e) {
      FAIL() << "run " << i << " (markers '" << seen << "' then '" << rest << "'): no checkpoint loads: " << e.what();
    }
    ASSERT_TRUE(step == current || step == next) << "run " << i << ": step " << step;
    ASSERT_TRUE(same_bits(got, fixture_values(step))) << "run " << i << ": generation " << step << " not bit-exact";
    if (step == current) {
      EXPECT_EQ(seen.find('c'), std::string::npos) << "run " << i << ": the commit was seen, the old version loads";
      killed_old += killed;
    } else {
      killed_new += killed;
      current = next;
    }
  }
  std::cout << "kill test: " << killed_old << " killed runs left the old checkpoint, " << killed_new
            << " the new one; " << finished << " finished before the kill; " << with_leftovers
            << " left a new uncommitted version directory behind; last marker before the kill:";
  for (const auto& [m, n] : last_marker) std::cout << " " << m << "=" << n;
  std::cout << "\n";
  EXPECT_GE(killed_old, 1);
  EXPECT_GE(killed_new, 1);
  EXPECT_GE(with_leftovers, 1) << "no kill landed between creating the version directory and the cleanup";
  // The next successful save removes every leftover.
  save_fixture(dir, current + 1, 2);
  expect_loads(dir, current + 1);
  EXPECT_EQ(entries(dir).size(), 2u);
  std::filesystem::remove_all(dir);
}

TEST(Checkpoint, TrainRefusesAnUnwritableSaveDirectoryBeforeTraining) {
  const std::string base = tmpdir("probe");
  std::filesystem::create_directories(base);
  spit(base + "/file", "x");
  TrainOptions o = small("tp=2", 1000000);  // were the check late, this run would never end
  o.save = base + "/file/ckpt";
  expect_error([&] { run(o); }, {"dtensor train: --save " + o.save + ": cannot write: Not a directory"},
               "--save under a file");
  // A fresh directory is created with its parents, and the probe leaves nothing behind.
  EXPECT_EQ(nn::checkpoint_dir_write_error(base + "/a/b"), "");
  EXPECT_TRUE(entries(base + "/a/b").empty());
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace dtensor::tools
