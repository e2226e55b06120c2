#include "nn/checkpoint.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string_view>
#include <system_error>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "dtensor/core/json.h"
#include "nlohmann/json.hpp"

namespace dtensor::nn {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Header lengths and data are written in host order; the format is defined as little-endian.
static_assert(std::endian::native == std::endian::little, "checkpoint files are little-endian");

constexpr char kMagic[8] = {'D', 'T', 'C', 'K', 'P', 'T', '1', '\n'};
constexpr size_t kPrelude = 16;  // magic + header length
constexpr char kFormat[] = "dtensor-checkpoint-1";
constexpr char kVersionPrefix[] = "ckpt-";
constexpr char kLatestTmpPrefix[] = "LATEST.tmp-";

SaveHook& save_hook() {
  static SaveHook hook;
  return hook;
}

void run_hook(const char* step, int rank) {
  if (save_hook()) save_hook()(step, rank);
}

std::string errno_str(int e) { return std::generic_category().message(e); }

uint64_t fnv1a(const void* data, size_t n) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Positive (it travels through a sum all-reduce) and fresh per save, so version names never collide.
int64_t random_nonce() {
  std::random_device rd;
  uint64_t x = (static_cast<uint64_t>(rd()) << 32) ^ rd() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return static_cast<int64_t>(x >> 2) + 1;
}

std::string version_name(int64_t step, int64_t nonce) {
  return absl::StrCat(kVersionPrefix, step, "-", absl::Hex(nonce, absl::kZeroPad16));
}

bool all_of(std::string_view s, int (*pred)(int)) {
  for (unsigned char c : s)
    if (!pred(c)) return false;
  return !s.empty();
}

// "ckpt-<step>-<16 hex digits>": the only names LATEST may hold (so it cannot point outside DIR) and the only
// directories a save removes.
bool is_version_name(std::string_view s) {
  if (s.substr(0, 5) != kVersionPrefix || s.size() < 5 + 1 + 1 + 16) return false;
  std::string_view rest = s.substr(5);
  const size_t dash = rest.find('-');
  return dash != std::string_view::npos && dash <= 19 && all_of(rest.substr(0, dash), ::isdigit) &&
         rest.size() - dash - 1 == 16 && all_of(rest.substr(dash + 1), ::isxdigit);
}

// rank<digits>.bin, the rank files of the flat layout before LATEST.
bool is_flat_rank_file(std::string_view s) {
  return s.size() > 8 && s.substr(0, 4) == "rank" && s.substr(s.size() - 4) == ".bin" &&
         all_of(s.substr(4, s.size() - 8), ::isdigit);
}

// Does this rank hold the copy of `t` that gets saved?
bool owns(const DTensor& t) {
  const auto& c = t.mesh()->coordinate();
  for (size_t i = 0; i < c.size(); ++i)
    if (!t.placements()[i].is_shard() && c[i] != 0) return false;
  return true;
}

json placements_json(const Placements& p) {
  json a = json::array();
  for (const auto& x : p) a.push_back(x.str());
  return a;
}

// ---------------------------------------------------------------------------------------------------------
// Writing: new files only, each durable before the next step of the protocol relies on it.

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

void write_all(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    DT_CHECK(n > 0, "save_checkpoint: writing ", path, " failed: ", n < 0 ? errno_str(errno) : "no progress");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
}

// Creates `path` (never an existing file: O_EXCL), writes `parts`, fsyncs and closes it.
void write_new_file(const std::string& path, std::initializer_list<std::string_view> parts) {
  Fd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  DT_CHECK(fd.get() >= 0, "save_checkpoint: cannot create ", path, ": ", errno_str(errno));
  for (std::string_view p : parts) write_all(fd.get(), p, path);
  DT_CHECK(::fsync(fd.get()) == 0, "save_checkpoint: fsync of ", path, " failed: ", errno_str(errno));
  DT_CHECK(::close(fd.release()) == 0, "save_checkpoint: closing ", path, " failed: ", errno_str(errno));
}

// Makes the entries created or renamed in `dir` durable.
void fsync_dir(const std::string& dir) {
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DT_CHECK(fd.get() >= 0, "save_checkpoint: cannot open directory ", dir, ": ", errno_str(errno));
  DT_CHECK(::fsync(fd.get()) == 0, "save_checkpoint: fsync of directory ", dir, " failed: ", errno_str(errno));
}

// One writer per directory: a second save's commit and cleanup would delete the first one's version
// (LATEST then names a removed folder). flock(2) on the directory itself (no lock file to clean up);
// the lock goes with the descriptor, also when the process dies.
class SaveLock {
 public:
  explicit SaveLock(const std::string& dir) {
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DT_CHECK(fd_ >= 0, "save_checkpoint: cannot open directory ", dir, ": ", errno_str(errno));
    if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      ::close(fd_);
      DT_CHECK(err != EWOULDBLOCK, "save_checkpoint: another save into ", dir,
               " is in progress (the directory is locked); one writer per checkpoint directory: wait for it "
               "or save elsewhere");
      DT_FAIL("save_checkpoint: cannot lock directory ", dir, ": ", errno_str(err));
    }
  }
  ~SaveLock() { ::close(fd_); }
  SaveLock(const SaveLock&) = delete;
  SaveLock& operator=(const SaveLock&) = delete;

 private:
  int fd_ = -1;
};

void make_dir(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DT_CHECK(!ec, "save_checkpoint: cannot create directory ", dir, ": ", ec.message());
}

void make_version_dir(const std::string& dir, const std::string& version) {
  const std::string path = dir + "/" + version;
  DT_CHECK(::mkdir(path.c_str(), 0755) == 0, "save_checkpoint: cannot create directory ", path, ": ",
           errno_str(errno));
}

void write_rank_file(const std::string& version_dir, const NamedTensors& tensors, const DeviceMesh& mesh) {
  json header;
  header["blocks"] = json::array();
  std::string data;
  for (const auto& [name, t] : tensors) {
    if (!owns(*t)) continue;
    Tensor local = t->local_tensor().to(cpu()).contiguous();  // device blocks are written from the host
    auto [shape, offset] = t->spec().local_block(mesh.coordinate());
    json b{{"name", name}, {"shape", shape}, {"offset", offset}, {"dtype", dtype_name(t->dtype())},
           {"begin", data.size()}, {"nbytes", local.nbytes()}, {"checksum", fnv1a(local.data_ptr(), local.nbytes())}};
    header["blocks"].push_back(b);
    data.append(static_cast<const char*>(local.data_ptr()), local.nbytes());
  }
  const std::string h = header.dump();
  const uint64_t hlen = h.size();
  char len[8];
  std::memcpy(len, &hlen, 8);
  const std::string path = version_dir + "/rank" + std::to_string(mesh.global_rank()) + ".bin";
  write_new_file(path, {std::string_view(kMagic, 8), std::string_view(len, 8), h, data});
  fsync_dir(version_dir);
}

void write_metadata(const std::string& version_dir, const NamedTensors& tensors, const DeviceMesh& mesh,
                    int64_t step) {
  json meta{{"format", kFormat}, {"step", step}, {"mesh", mesh.shape()}, {"ranks", mesh.ranks()}};
  meta["tensors"] = json::array();
  for (const auto& [name, t] : tensors)
    meta["tensors"].push_back({{"name", name}, {"shape", t->shape()}, {"dtype", dtype_name(t->dtype())},
                               {"placements", placements_json(t->placements())}});
  write_new_file(version_dir + "/metadata.json", {meta.dump(1)});
  fsync_dir(version_dir);
}

// The commit point: the rename makes LATEST name `version`. Sets *committed once it is done.
void commit(const std::string& dir, const std::string& version, int rank, bool* committed) {
  const std::string tmp = dir + "/" + kLatestTmpPrefix + version, latest = dir + "/LATEST";
  write_new_file(tmp, {version, "\n"});
  run_hook("latest-tmp", rank);
  DT_CHECK(::rename(tmp.c_str(), latest.c_str()) == 0, "save_checkpoint: renaming ", tmp, " to ", latest,
           " failed: ", errno_str(errno));
  *committed = true;
  fsync_dir(dir);
  run_hook("commit", rank);
}

// Removes what LATEST no longer names: other versions (earlier, failed or killed saves), LATEST
// temporaries and the flat layout's files. Best effort: what stays is ignored by load.
void remove_stale(const std::string& dir, const std::string& current) {
  std::error_code ec;
  std::vector<fs::path> stale;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n != current && (is_version_name(n) || n.rfind(kLatestTmpPrefix, 0) == 0 || n == "metadata.json" ||
                         is_flat_rank_file(n)))
      stale.push_back(it->path());
  }
  for (const auto& p : stale) fs::remove_all(p, ec);
}

// Runs `f`; returns "" or the message of what it threw.
template <typename F>
std::string attempt(F&& f) {
  try {
    f();
    return "";
  } catch (const std::exception& e) {
    return e.what()[0] != '\0' ? e.what() : "unknown error";
  }
}

void all_reduce_mesh(const DeviceMesh& mesh, Tensor& t, ReduceOp op) {
  for (int d = 0; d < mesh.ndim(); ++d) mesh.group(d).all_reduce(t, op, mesh.timeout());
}

// Collective over the mesh: every rank gets rank 0's `value` and, if any rank's `error` is set, the
// message of the lowest such rank (so all ranks throw the same error). One small all-reduce over each
// mesh dim; a second carries the message only when something failed.
struct Agreement {
  std::string error;
  int64_t value = 0;
};

Agreement agree(const DeviceMesh& mesh, const std::string& error, int64_t value) {
  constexpr int64_t kNone = INT64_MAX;
  const bool lead = mesh.global_rank() == mesh.ranks()[0];
  Tensor t = Tensor::from_vector<int64_t>({error.empty() ? kNone : mesh.global_rank(), lead ? value : kNone}, {2});
  all_reduce_mesh(mesh, t, ReduceOp::kMin);
  Agreement a;
  const int64_t failed = t.data<int64_t>()[0];
  a.value = t.data<int64_t>()[1];
  if (failed == kNone) return a;
  constexpr int64_t kMaxMessage = 1024;
  Tensor msg = Tensor::zeros({kMaxMessage}, DType::kInt64);  // one byte an element; others send zeros
  if (mesh.global_rank() == failed)
    for (size_t i = 0; i < error.size() && i < kMaxMessage; ++i)
      msg.data<int64_t>()[i] = static_cast<unsigned char>(error[i]);
  all_reduce_mesh(mesh, msg, ReduceOp::kSum);
  for (int64_t i = 0; i < kMaxMessage && msg.data<int64_t>()[i] != 0; ++i)
    a.error.push_back(static_cast<char>(msg.data<int64_t>()[i]));
  if (mesh.size() > 1) absl::StrAppend(&a.error, " (on rank ", failed, ")");
  return a;
}

// ---------------------------------------------------------------------------------------------------------
// Reading: every size checked against the file, the header and the metadata before a byte is copied.

std::string read_whole_file(const std::string& path) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  DT_CHECK(fd.get() >= 0, "load_checkpoint: cannot read ", path, ": ", errno_str(errno));
  struct stat st;
  DT_CHECK(::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode), "load_checkpoint: ", path, " is not a regular file");
  std::string s(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < s.size()) {
    const ssize_t n = ::read(fd.get(), s.data() + got, s.size() - got);
    if (n < 0 && errno == EINTR) continue;
    DT_CHECK(n >= 0, "load_checkpoint: reading ", path, " failed: ", errno_str(errno));
    if (n == 0) break;  // shrank while reading: the size checks below see the short file
    got += static_cast<size_t>(n);
  }
  s.resize(got);
  return s;
}

// Parses JSON from `path`, refusing nesting deeper than the format has (a hostile file cannot exhaust
// the stack).
json parse_json(std::string_view text, const std::string& path) {
  return dtensor::parse_json(text, "load_checkpoint: " + path + " is corrupted", 8);
}

// Typed fields of a JSON object read from `path`; `where` names the object ("blocks[2]"). Each accessor
// throws dtensor::Error naming the file, the field and what it must be.
class Fields {
 public:
  Fields(const json& obj, const std::string& path, std::string where)
      : obj_(obj), path_(path), where_(std::move(where)) {
    DT_CHECK(obj.is_object(), "load_checkpoint: ", path_, " is corrupted: '", where_, "' must be a JSON object, found ",
             excerpt(obj));
  }

  const json& at(const char* key) const {
    auto it = obj_.find(key);
    DT_CHECK(it != obj_.end(), "load_checkpoint: ", path_, " is corrupted: field '", name(key), "' is missing");
    return *it;
  }
  std::string str(const char* key) const {
    const json& v = at(key);
    if (!v.is_string()) fail(key, "a string", v);
    return v.get<std::string>();
  }
  int64_t int64(const char* key) const { return as_int64(at(key), key, "an integer"); }
  uint64_t uint64(const char* key) const {
    const json& v = at(key);
    if (!v.is_number_unsigned()) fail(key, "a non-negative integer", v);
    return v.get<uint64_t>();
  }
  const json& array(const char* key) const {
    const json& v = at(key);
    if (!v.is_array()) fail(key, "an array", v);
    return v;
  }
  // An array of non-negative int64 (a shape, an offset, a rank list).
  Shape dims(const char* key) const {
    Shape s;
    for (const json& v : array(key)) {
      const int64_t x = as_int64(v, key, "a list of non-negative integers");
      if (x < 0) fail(key, "a list of non-negative integers", v);
      s.push_back(x);
    }
    return s;
  }
  DType dtype(const char* key) const {
    const std::string n = str(key);
    try {
      return dtype_from_name(n);
    } catch (const Error& e) {
      DT_FAIL("load_checkpoint: ", path_, " is corrupted: field '", name(key), "': ", e.what());
    }
  }

 private:
  int64_t as_int64(const json& v, const char* key, const char* expected) const {
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}))
      fail(key, expected, v);
    return v.get<int64_t>();
  }
  std::string name(const char* key) const { return where_.empty() ? key : where_ + "." + key; }
  static std::string excerpt(const json& v) {
    std::string s = v.dump();
    return s.size() > 40 ? s.substr(0, 40) + "..." : s;
  }
  [[noreturn]] void fail(const char* key, const char* expected, const json& found) const {
    DT_FAIL("load_checkpoint: ", path_, " is corrupted: field '", name(key), "' must be ", expected, ", found ",
            excerpt(found));
  }

  const json& obj_;
  const std::string& path_;
  std::string where_;
};

struct Block {
  Shape shape, offset;
  DType dtype;
  uint64_t begin, nbytes, checksum;
};

// One rank file: its bytes and its blocks by tensor name (at most one each).
struct ShardFile {
  std::string path, bytes;
  size_t data_begin = 0;
  std::map<std::string, Block> blocks;
  size_t data_size() const { return bytes.size() - data_begin; }
  const char* data() const { return bytes.data() + data_begin; }
};

// numel(shape) * itemsize(dtype) in bytes, or false if it overflows int64.
bool block_bytes(const Shape& shape, DType dtype, uint64_t* out) {
  uint64_t n = itemsize(dtype);
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) return false;
  *out = n;
  return n <= uint64_t{INT64_MAX};
}

std::pair<std::string, Block> read_block(const Fields& f, const ShardFile& file) {
  const std::string name = f.str("name");
  Block b;
  b.shape = f.dims("shape");
  b.offset = f.dims("offset");
  b.dtype = f.dtype("dtype");
  b.begin = f.uint64("begin");
  b.nbytes = f.uint64("nbytes");
  b.checksum = f.uint64("checksum");
  const std::string& path = file.path;
  DT_CHECK(b.offset.size() == b.shape.size(), "load_checkpoint: ", path, " is corrupted: block '", name, "' has shape ",
           shape_str(b.shape), " but offset ", shape_str(b.offset), " (expected one offset per dim)");
  uint64_t expected = 0;
  DT_CHECK(block_bytes(b.shape, b.dtype, &expected), "load_checkpoint: ", path, " is corrupted: block '", name,
           "' has shape ", shape_str(b.shape), ", whose size in bytes overflows");
  DT_CHECK(b.nbytes == expected, "load_checkpoint: ", path, " is corrupted: block '", name, "' claims ", b.nbytes,
           " bytes, but ", dtype_name(b.dtype), shape_str(b.shape), " is ", expected, " bytes");
  DT_CHECK(b.begin <= file.data_size() && b.nbytes <= file.data_size() - b.begin, "load_checkpoint: ", path,
           " is truncated: '", name, "' needs ", b.nbytes, " bytes at ", b.begin, " of the data section, which has ",
           file.data_size());
  DT_CHECK(fnv1a(file.data() + b.begin, b.nbytes) == b.checksum, "load_checkpoint: ", path, " is corrupted: '",
           name, "' fails its checksum");
  return {name, std::move(b)};
}

ShardFile read_shard(const std::string& path) {
  ShardFile f;
  f.path = path;
  f.bytes = read_whole_file(path);
  DT_CHECK(f.bytes.size() >= kPrelude && std::memcmp(f.bytes.data(), kMagic, 8) == 0, "load_checkpoint: ", path,
           " is not a dtensor checkpoint shard (bad magic, or truncated to ", f.bytes.size(), " bytes)");
  uint64_t hlen;
  std::memcpy(&hlen, f.bytes.data() + 8, 8);
  DT_CHECK(hlen <= f.bytes.size() - kPrelude, "load_checkpoint: ", path, " is truncated or corrupted: its header is ",
           hlen, " bytes, but only ", f.bytes.size() - kPrelude, " follow the header length");
  f.data_begin = kPrelude + hlen;
  const json header = parse_json(std::string_view(f.bytes).substr(kPrelude, hlen), path);
  const json& blocks = Fields(header, path, "").array("blocks");
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto [name, b] = read_block(Fields(blocks[i], path, absl::StrCat("blocks[", i, "]")), f);
    DT_CHECK(f.blocks.emplace(name, std::move(b)).second, "load_checkpoint: ", path, " is corrupted: '", name,
             "' has more than one block (expected one per rank file)");
  }
  return f;
}

struct SavedTensor {
  Shape shape;
  DType dtype;
};

struct Metadata {
  int64_t step = 0;
  Shape ranks;
  std::map<std::string, SavedTensor> tensors;
};

Metadata read_metadata(const std::string& path) {
  const json j = parse_json(read_whole_file(path), path);
  const Fields top(j, path, "");
  DT_CHECK(top.str("format") == kFormat, "load_checkpoint: ", path, " is not a dtensor checkpoint (format '",
           top.str("format"), "', expected '", kFormat, "')");
  Metadata m;
  m.step = top.int64("step");
  m.ranks = top.dims("ranks");
  const json& ts = top.array("tensors");
  for (size_t i = 0; i < ts.size(); ++i) {
    const Fields t(ts[i], path, absl::StrCat("tensors[", i, "]"));
    const std::string name = t.str("name");
    DT_CHECK(m.tensors.emplace(name, SavedTensor{t.dims("shape"), t.dtype("dtype")}).second, "load_checkpoint: ",
             path, " is corrupted: tensor '", name, "' is listed twice");
  }
  return m;
}

// The directory holding metadata.json: the version LATEST names, or `dir` itself in the flat layout.
std::string resolve_version(const std::string& dir) {
  const std::string latest = dir + "/LATEST";
  std::error_code ec;
  if (fs::exists(latest, ec)) {
    std::string name = read_whole_file(latest);
    if (!name.empty() && name.back() == '\n') name.pop_back();
    DT_CHECK(is_version_name(name), "load_checkpoint: ", latest, " is corrupted: it holds '",
             absl::CHexEscape(name.substr(0, 64)), "', expected a version name ckpt-<step>-<16 hex digits>");
    return dir + "/" + name;
  }
  if (fs::exists(dir + "/metadata.json", ec)) return dir;
  DT_FAIL("load_checkpoint: no checkpoint at ", dir, " (missing ", latest, " and ", dir, "/metadata.json)");
}

// Does block `b` lie inside `saved`, with its dtype and rank?
void check_fits(const Block& b, const SavedTensor& saved, const std::string& name, const std::string& path) {
  DT_CHECK(b.dtype == saved.dtype && b.shape.size() == saved.shape.size(), "load_checkpoint: ", path,
           " is corrupted: its block of '", name, "' is ", dtype_name(b.dtype), shape_str(b.shape),
           ", the metadata says ", dtype_name(saved.dtype), shape_str(saved.shape));
  for (size_t d = 0; d < b.shape.size(); ++d)
    DT_CHECK(b.offset[d] <= saved.shape[d] && b.shape[d] <= saved.shape[d] - b.offset[d], "load_checkpoint: ", path,
             " is corrupted: its block of '", name, "' at offset ", shape_str(b.offset), " with shape ",
             shape_str(b.shape), " reaches outside the global shape ", shape_str(saved.shape));
}

bool overlap(const Block& a, const Block& b) {
  if (numel(a.shape) == 0 || numel(b.shape) == 0) return false;
  for (size_t d = 0; d < a.shape.size(); ++d)
    if (a.offset[d] + a.shape[d] <= b.offset[d] || b.offset[d] + b.shape[d] <= a.offset[d]) return false;
  return true;
}

void copy_block(Tensor& full, const Block& b, const ShardFile& f) {
  if (b.nbytes == 0) return;
  Tensor dst = full;
  for (size_t d = 0; d < b.shape.size(); ++d) dst = dst.narrow(static_cast<int64_t>(d), b.offset[d], b.shape[d]);
  Tensor src = Tensor::empty(b.shape, b.dtype);
  std::memcpy(src.data_ptr(), f.data() + b.begin, b.nbytes);
  dst.copy_(src);
}

// The global tensor `name` from the rank files' blocks: each inside the global shape, none overlapping
// another, so that covering every element means covering each exactly once.
Tensor assemble(const std::string& name, const SavedTensor& saved, const std::vector<ShardFile>& files,
                const std::string& version_dir) {
  Tensor full = Tensor::empty(saved.shape, saved.dtype);
  std::vector<std::pair<const Block*, const ShardFile*>> done;
  int64_t covered = 0;
  for (const ShardFile& f : files) {
    auto it = f.blocks.find(name);
    if (it == f.blocks.end()) continue;
    const Block& b = it->second;
    check_fits(b, saved, name, f.path);
    for (const auto& [o, of] : done)
      DT_CHECK(!overlap(*o, b), "load_checkpoint: ", f.path, " is corrupted: its block of '", name, "' at ",
               shape_str(b.offset), " overlaps the one in ", of->path, " at ", shape_str(o->offset));
    done.push_back({&b, &f});
    copy_block(full, b, f);
    covered += numel(b.shape);
  }
  DT_CHECK(covered == numel(saved.shape), "load_checkpoint: ", version_dir, " holds ", covered, " of the ",
           numel(saved.shape), " elements of '", name, "' (a rank file is missing blocks)");
  return full;
}

}  // namespace

void set_save_hook_for_testing(SaveHook hook) { save_hook() = std::move(hook); }

void save_checkpoint(const std::string& dir, const NamedTensors& tensors, int64_t step) {
  DT_CHECK(!tensors.empty(), "save_checkpoint: ", dir, ": no tensors");
  DT_CHECK(step >= 0, "save_checkpoint: ", dir, ": step ", step, " is negative");
  std::map<std::string, int> seen;
  for (const auto& [name, t] : tensors)
    DT_CHECK(seen.emplace(name, 0).second, "save_checkpoint: ", dir, ": tensor name '", name, "' appears twice");
  const DeviceMesh& mesh = *tensors[0].second->mesh();
  const int rank = mesh.global_rank();
  const bool lead = rank == mesh.ranks()[0];
  // Rank 0's nonce names the fresh version directory on every rank (shared by the first agreement).
  const int64_t nonce = lead ? random_nonce() : 0;
  std::string version = version_name(step, nonce), version_dir = dir + "/" + version;
  bool committed = false;
  // Every rank learns whether a step failed anywhere; before the commit rank 0 then removes the partial
  // version, so the failed save leaves nothing behind.
  auto check = [&](const std::string& error) {
    Agreement a = agree(mesh, error, nonce);
    if (a.error.empty()) return a.value;
    if (lead && !committed) {
      std::error_code ec;
      fs::remove(dir + "/" + kLatestTmpPrefix + version, ec);
      fs::remove_all(version_dir, ec);
    }
    DT_FAIL(a.error);
  };
  // 1. Rank 0 takes the directory's lock (held until the save ends) and creates the version directory.
  std::string error;
  std::unique_ptr<SaveLock> lock;
  if (lead) error = attempt([&] {
      make_dir(dir);
      lock = std::make_unique<SaveLock>(dir);
      make_version_dir(dir, version);
      run_hook("version-dir", rank);
    });
  version = version_name(step, check(error));
  version_dir = dir + "/" + version;
  // 2. Every rank writes its file.
  check(attempt([&] {
    write_rank_file(version_dir, tensors, mesh);
    run_hook("rank-file", rank);
  }));
  // 3. Rank 0 writes the metadata, commits and removes what LATEST no longer names.
  if (lead) error = attempt([&] {
      write_metadata(version_dir, tensors, mesh, step);
      run_hook("metadata", rank);
      commit(dir, version, rank, &committed);
      remove_stale(dir, version);
      run_hook("cleanup", rank);
    });
  check(error);
}

int64_t load_checkpoint(const std::string& dir, const NamedTensors& tensors) {
  const std::string version_dir = resolve_version(dir), meta_path = version_dir + "/metadata.json";
  const Metadata meta = read_metadata(meta_path);
  std::vector<ShardFile> files;
  files.reserve(meta.ranks.size());
  for (int64_t r : meta.ranks) {
    files.push_back(read_shard(version_dir + "/rank" + std::to_string(r) + ".bin"));
    for (const auto& [name, b] : files.back().blocks)
      DT_CHECK(meta.tensors.count(name), "load_checkpoint: ", files.back().path, " is corrupted: it has a block of '",
               name, "', which ", meta_path, " does not list");
  }
  // Every saved tensor needs a place: a checkpoint of a deeper model loaded into a shallower one
  // would otherwise drop weights without a word (as torch's load_state_dict with strict=True).
  std::set<std::string> given;
  for (const auto& [n, t] : tensors) given.insert(n);
  std::vector<std::string> unplaced;
  for (const auto& [name, saved] : meta.tensors)
    if (!given.count(name)) unplaced.push_back(name);
  if (!unplaced.empty()) {
    std::string shown;
    for (size_t i = 0; i < unplaced.size() && i < 4; ++i) shown += (i ? ", '" : "'") + unplaced[i] + "'";
    DT_FAIL("load_checkpoint: ", meta_path, " holds ", unplaced.size(), " tensor", unplaced.size() == 1 ? "" : "s",
            " the model being loaded does not have (", shown, unplaced.size() > 4 ? ", ..." : "",
            "): it was saved from another model (more layers, other sizes or experts?); every saved tensor "
            "must have a place");
  }
  for (const auto& [name, t] : tensors) {
    auto it = meta.tensors.find(name);
    DT_CHECK(it != meta.tensors.end(), "load_checkpoint: ", meta_path, " has no tensor '", name, "'");
    const SavedTensor& saved = it->second;
    DT_CHECK(saved.shape == t->shape() && saved.dtype == t->dtype(), "load_checkpoint: '", name, "' is ",
             dtype_name(saved.dtype), shape_str(saved.shape), " in ", meta_path, " but ", dtype_name(t->dtype()),
             shape_str(t->shape()), " here");
    // Reassemble the global tensor, then keep this rank's block of the target layout.
    Tensor full = assemble(name, saved, files, version_dir);
    DTensor placed = distribute_tensor(full, t->mesh(), t->placements());
    Tensor(t->local_tensor()).copy_(placed.local_tensor());
  }
  return meta.step;
}

std::string checkpoint_dir_write_error(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return ec.message();
  const std::string probe = absl::StrCat(dir, "/.write-probe-", absl::Hex(random_nonce(), absl::kZeroPad16));
  Fd fd(::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return errno_str(errno);
  const bool wrote = ::write(fd.get(), "x", 1) == 1;
  const int e = errno;
  ::close(fd.release());
  ::unlink(probe.c_str());
  return wrote ? "" : errno_str(e);
}

}  // namespace dtensor::nn
