#include "dtensor/collectives/gloo_backend.h"

#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "dtensor/collectives/reduce.h"
#include "dtensor/collectives/store_util.h"

#define HIREDIS_NESTED_INCLUDE 1
#include "gloo/allgatherv.h"
#include "gloo/allreduce.h"
#include "gloo/alltoallv.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/common/logging.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/redis_store.h"
#include "hiredis/hiredis.h"
#include "gloo/transport/device.h"
#include "gloo/transport/tcp/device.h"
#include "gloo/transport/unbound_buffer.h"

namespace dtensor {
namespace {

using Clock = std::chrono::steady_clock;
using gloo::rendezvous::Store;

// Slots of point-to-point messages: a prefix none of Gloo's collectives use, then the user tag.
constexpr uint64_t kP2PSlotBase = uint64_t{0x40} << 56;
// Slots of reduce_scatter's messages: the next prefix, then the op's sequence number.
constexpr uint64_t kReduceScatterSlotBase = uint64_t{0x41} << 56;

// ---------------------------------------------------------------------------------------------
// Store helpers.

// Gloo's FileStore and RedisStore measure wait timeouts in whole seconds (a 1 ms probe waits up to
// a second). This wraps either with a millisecond-exact polling wait built on their check().
template <typename Base>
class PollingStore : public Base {
 public:
  using Base::Base;
  void wait(const std::vector<std::string>& keys) override { wait(keys, Store::kDefaultTimeout); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const auto deadline = Clock::now() + timeout;
    while (!this->check(keys)) {
      const auto now = Clock::now();
      if (now >= deadline) {
        throw gloo::IoException(absl::StrCat("wait timeout (", timeout.count(), " ms) for key(s) ",
                                             absl::StrJoin(keys, ", ")));
      }
      std::this_thread::sleep_for(
          std::min<Clock::duration>(std::chrono::milliseconds(5), deadline - now));
    }
  }
};

// Escapes keys to [A-Za-z0-9_-] plus %XX, so that no store sees odd characters (group names contain
// '/', and PrefixStore joins with '/').
class EscapingStore : public Store {
 public:
  explicit EscapingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    inner_->set(escape(key), data);
  }
  std::vector<char> get(const std::string& key) override { return inner_->get(escape(key)); }
  void wait(const std::vector<std::string>& keys) override { inner_->wait(escape_all(keys)); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    inner_->wait(escape_all(keys), timeout);
  }

 private:
  static std::string escape(const std::string& key) {
    static const char* kHex = "0123456789ABCDEF";
    std::string out;
    out.reserve(key.size());
    for (unsigned char c : key) {
      if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '-') {
        out.push_back(static_cast<char>(c));
      } else {
        out.push_back('%');
        out.push_back(kHex[c >> 4]);
        out.push_back(kHex[c & 15]);
      }
    }
    return out;
  }
  static std::vector<std::string> escape_all(const std::vector<std::string>& keys) {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(escape(k));
    return out;
  }

  std::unique_ptr<Store> inner_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Rendezvous helpers shared with the NCCL backend (store_util.h).
namespace store_util {

std::vector<char> to_bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }
std::string from_bytes(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

// True when `key` is in the store; waits at most ~1 ms.
bool probe(Store& store, const std::string& key) {
  try {
    store.wait({key}, std::chrono::milliseconds(1));
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

std::string this_host() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

// "rank 3" or "ranks 2, 3".
std::string ranks_phrase(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// A process on this host is running (not gone, not a zombie waiting to be reaped).
bool pid_running(int pid) {
  if (pid <= 0) return true;  // unknown: do not accuse
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  if (!stat) return false;
  std::string line;
  std::getline(stat, line);
  // Format: "pid (comm) S ..."; comm may contain spaces or parentheses, so look after the last ')'.
  size_t close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return true;
  char state = line[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

PeerInfo parse_peer(const std::string& value) {
  PeerInfo info;
  std::vector<std::string> parts = absl::StrSplit(value, ' ');
  if (parts.size() == 2) {
    info.host = parts[0];
    if (!absl::SimpleAtoi(parts[1], &info.pid)) info.pid = 0;
  }
  return info;
}

// Waits for every member's alive/<global rank> entry and returns their host and pid in member
// order. `what` describes the set joined.
std::vector<PeerInfo> read_peers(Store& store, const std::vector<int>& members, int me, Timeout timeout,
                                 const std::string& what) {
  auto key = [](int r) { return absl::StrCat("alive/", r); };
  std::vector<std::string> keys;
  for (int r : members) keys.push_back(key(r));
  try {
    store.wait(keys, timeout);
  } catch (const std::exception& e) {
    std::vector<int> missing;
    for (int r : members) {
      if (!probe(store, key(r))) missing.push_back(r);
    }
    if (!missing.empty()) {
      throw CommError(absl::StrCat(ranks_phrase(missing), " did not join ", what, " within ",
                                   timeout.count(), " ms (seen from rank ", me, ")"));
    }
    // Everyone arrived just as the wait gave up: carry on.
  }
  std::vector<PeerInfo> peers;
  for (int r : members) {
    PeerInfo info;
    try {
      info = parse_peer(from_bytes(store.get(key(r))));
    } catch (const std::exception& e) {
      throw CommError(absl::StrCat("rank ", me, ": cannot read rank ", r, "'s entry while joining ",
                                   what, ": ", e.what()));
    }
    peers.push_back(info);
  }
  return peers;
}

// Join check: publishes this rank's "host pid" under alive/<global rank> and waits for every
// member (read_peers).
std::vector<PeerInfo> join(Store& store, const std::vector<int>& members, int me, Timeout timeout,
                           const std::string& what) {
  try {
    store.set(absl::StrCat("alive/", me), to_bytes(absl::StrCat(this_host(), " ", getpid())));
  } catch (const std::exception& e) {
    throw CommError(absl::StrCat("rank ", me, ": cannot publish itself to the store while joining ",
                                 what, ": ", e.what()));
  }
  return read_peers(store, members, me, timeout, what);
}

}  // namespace store_util

namespace {

using store_util::from_bytes;
using store_util::join;
using store_util::read_peers;
using store_util::pid_running;
using store_util::probe;
using store_util::ranks_phrase;
using store_util::this_host;
using store_util::to_bytes;

// Calls f with a value of an unsigned integer type of `size` bytes, for Gloo's typed setters.
template <typename F>
void with_element_type(size_t size, F&& f) {
  struct Bytes16 {  // complex128: Gloo only moves these (reductions go through reduce_pair)
    uint64_t lo, hi;
  };
  switch (size) {
    case 1: f(uint8_t{}); break;
    case 2: f(uint16_t{}); break;
    case 4: f(uint32_t{}); break;
    case 8: f(uint64_t{}); break;
    case 16: f(Bytes16{}); break;
    default: DT_FAIL("gloo backend: unsupported element size ", size);
  }
}

int64_t sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// ---------------------------------------------------------------------------------------------
// The group.

class GlooGroup : public ProcessGroup {
 public:
  GlooGroup(std::string name, int rank, std::vector<int> global_ranks,
            std::shared_ptr<Store> base_store, std::unique_ptr<Store> store,
            std::vector<PeerInfo> peers, std::shared_ptr<gloo::Context> ctx)
      : ProcessGroup(std::move(name), rank, std::move(global_ranks)),
        base_store_(std::move(base_store)),
        store_(std::move(store)),
        peers_(std::move(peers)),
        ctx_(std::move(ctx)),
        host_(this_host()) {}

  ~GlooGroup() override {
    ctx_.reset();  // before the stores the context's pairs may still refer to
  }

  // GlooBackend::close(): drops the connections; the group is unusable from here on.
  void close() {
    ctx_.reset();
    if (broken_.empty()) broken_ = "because the process group was destroyed (destroy_process_group)";
  }

  void do_all_reduce(const Tensor& in, Tensor& t, ReduceOp op, Timeout timeout) override {
    const char* name = "all_reduce";
    const int n = size();
    uint32_t seq = next_seq();
    if (n == 1 && in.data_ptr() != t.data_ptr() && in.numel() > 0) std::memcpy(t.data_ptr(), in.data_ptr(), in.nbytes());
    run(name, seq, timeout,
        [&] { allreduce_raw(in.data_ptr(), t.data_ptr(), t.numel(), t.dtype(), op, seq, timeout); });
    if (op == ReduceOp::kAvg) finish_avg(t.data_ptr(), t.numel(), t.dtype(), n);
  }

  void do_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                     Timeout timeout) override {
    const char* name = "all_gather";
    const int64_t total = sum(counts);
    const int n = size();
    uint32_t seq = next_seq();
    if (n == 1 || total == 0) {
      if (total > 0) std::memcpy(out.data_ptr(), in.data_ptr(), in.nbytes());
      return;
    }
    run(name, seq, timeout, [&] {
      gloo::AllgathervOptions opts(ctx_);
      std::vector<size_t> elements(counts.begin(), counts.end());
      // An empty input still needs a valid pointer; nothing is read from it.
      void* in_ptr = in.numel() > 0 ? in.data_ptr() : out.data_ptr();
      with_element_type(in.element_size(), [&](auto zero) {
        using T = decltype(zero);
        opts.setInput(static_cast<T*>(in_ptr), static_cast<size_t>(in.numel()));
        opts.setOutput(static_cast<T*>(out.data_ptr()), elements);
      });
      opts.setTag(seq);
      opts.setTimeout(timeout);
      gloo::allgatherv(opts);
    });
  }

  // Direct exchange (Gloo has no options-based reduce-scatter): block r of `in` goes straight from
  // `in` to rank r, the other ranks' blocks for this rank land in a scratch buffer, and they are
  // reduced into `out` in rank order (((b0 + b1) + b2) + ..., as the threads backend does), the
  // first reduction reading this rank's block from `in`. Each rank sends (k-1)/k of `in`, as a ring
  // reduce-scatter does, and `in` is never copied.
  void do_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                         ReduceOp op, Timeout timeout) override {
    const char* name = "reduce_scatter";
    const int n = size();
    const int me = rank();
    uint32_t seq = next_seq();
    const size_t es = in.element_size();
    std::vector<int64_t> offset(n + 1, 0);
    for (int r = 0; r < n; ++r) offset[r + 1] = offset[r] + counts[r];
    const int64_t mine = counts[me];
    const char* in_bytes = static_cast<const char*>(in.data_ptr());
    if (n == 1) {
      if (mine > 0) std::memcpy(out.data_ptr(), in_bytes, mine * es);
      return;
    }
    // The block received from rank r is at scratch index r (r < me) or r - 1 (r > me).
    Tensor scratch = Tensor::empty({mine * (n - 1)}, in.dtype());
    char* scratch_bytes = static_cast<char*>(scratch.data_ptr());
    auto block = [&](int r) -> const void* {
      if (r == me) return in_bytes + offset[me] * es;
      return scratch_bytes + (r < me ? r : r - 1) * mine * es;
    };
    run(name, seq, timeout, [&] {
      const auto deadline = Clock::now() + timeout;
      auto left = [&] {
        auto l = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        return std::max(l, std::chrono::milliseconds(1));
      };
      const uint64_t slot = kReduceScatterSlotBase | seq;
      // Empty messages are skipped on both sides (both know every count).
      std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> recvs(n);
      if (mine > 0) {
        for (int r = 0; r < n; ++r) {
          if (r == me) continue;
          recvs[r] = ctx_->createUnboundBuffer(const_cast<void*>(block(r)), mine * es);
          recvs[r]->recv(r, slot);
        }
      }
      std::unique_ptr<gloo::transport::UnboundBuffer> sends;
      int posted = 0;
      if (in.numel() > mine) {
        sends = ctx_->createUnboundBuffer(in.data_ptr(), in.nbytes());
        for (int r = 0; r < n; ++r) {
          if (r == me || counts[r] == 0) continue;
          sends->send(r, slot, offset[r] * es, counts[r] * es);
          ++posted;
        }
      }
      if (mine > 0) {
        for (int r = 0; r < n; ++r) {
          if (r != me && !recvs[r]->waitRecv(left())) throw gloo::IoException("aborted");
          if (r == 1) {
            reduce_pair(out.data_ptr(), block(0), block(1), mine, in.dtype(), op);
          } else if (r > 1) {
            reduce_into(out.data_ptr(), block(r), mine, in.dtype(), op);
          }
        }
      }
      for (int i = 0; i < posted; ++i)
        if (!sends->waitSend(left())) throw gloo::IoException("aborted");
    });
    if (op == ReduceOp::kAvg && mine > 0) finish_avg(out.data_ptr(), mine, out.dtype(), n);
  }

  void do_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                     const std::vector<int64_t>& recv_counts, Timeout timeout) override {
    const char* name = "all_to_all";
    uint32_t seq = next_seq();
    if (size() == 1) {
      if (in.numel() > 0) std::memcpy(out.data_ptr(), in.data_ptr(), in.nbytes());
      return;
    }
    run(name, seq, timeout, [&] {
      gloo::AlltoallvOptions opts(ctx_);
      with_element_type(in.element_size(), [&](auto zero) {
        using T = decltype(zero);
        opts.setInput(static_cast<T*>(in.data_ptr()), send_counts);
        opts.setOutput(static_cast<T*>(out.data_ptr()), recv_counts);
      });
      opts.setTag(seq);
      opts.setTimeout(std::max(timeout, Timeout(1)));
      gloo::alltoallv(opts);
    });
  }

  void do_broadcast(Tensor& t, int root, Timeout timeout) override {
    const char* name = "broadcast";
    uint32_t seq = next_seq();
    if (size() == 1 || t.numel() == 0) return;
    run(name, seq, timeout, [&] {
      gloo::BroadcastOptions opts(ctx_);
      with_element_type(t.element_size(), [&](auto zero) {
        using T = decltype(zero);
        opts.setOutput(static_cast<T*>(t.data_ptr()), static_cast<size_t>(t.numel()));
      });
      opts.setRoot(root);
      opts.setTag(seq);
      opts.setTimeout(timeout);
      gloo::broadcast(opts);
    });
  }

  void do_barrier(Timeout timeout) override {
    const char* name = "barrier";
    uint32_t seq = next_seq();
    if (size() == 1) return;
    run(name, seq, timeout, [&] {
      gloo::BarrierOptions opts(ctx_);
      opts.setTag(seq);
      opts.setTimeout(timeout);
      gloo::barrier(opts);
    });
  }

  void do_batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout) override {
    const char* name = "batch_isend_irecv";
    check_usable(name);
    ctx_->setTimeout(timeout);
    const auto deadline = Clock::now() + timeout;
    struct Pending {
      const P2POp* op;
      std::unique_ptr<gloo::transport::UnboundBuffer> buf;
    };
    std::vector<Pending> pending;
    auto describe_op = [&](const P2POp& p) {
      return absl::StrCat(p.kind == P2POp::kSend ? "send to" : "recv from", " rank ",
                          global_ranks()[p.peer], " (tag ", p.tag, ", ", p.tensor.nbytes(),
                          " bytes)");
    };
    const P2POp* current = nullptr;
    try {
      for (const P2POp& p : ops) {
        if (p.tensor.nbytes() == 0) continue;  // both sides skip empty messages
        current = &p;
        auto buf = ctx_->createUnboundBuffer(p.tensor.data_ptr(), p.tensor.nbytes());
        const uint64_t slot = kP2PSlotBase | static_cast<uint32_t>(p.tag);
        if (p.kind == P2POp::kSend) {
          buf->send(p.peer, slot);
        } else {
          buf->recv(p.peer, slot);
        }
        pending.push_back({&p, std::move(buf)});
      }
      for (Pending& p : pending) {
        current = p.op;
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        left = std::max(left, std::chrono::milliseconds(1));
        bool ok = p.op->kind == P2POp::kSend ? p.buf->waitSend(left) : p.buf->waitRecv(left);
        if (!ok) throw gloo::IoException("aborted");
      }
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::vector<int> involved;
      if (current != nullptr) {
        involved.push_back(current->peer);
      } else {
        for (const P2POp& p : ops) involved.push_back(p.peer);
      }
      std::string detail = current ? absl::StrCat(describe_op(*current), " did not complete")
                                   : std::string("posting the batch failed");
      fail(name, /*seq=*/0, /*collective=*/false, involved, timeout, e.what(), detail);
    }
  }

 private:
  uint32_t next_seq() { return next_seq_++; }

  void check_usable(const char* op) const {
    if (!broken_.empty()) {
      throw CommError(absl::StrCat(op, " on ", describe(), " (rank ", global_ranks()[rank()],
                                   "): the group is unusable ", broken_));
    }
  }

  // Runs one Gloo collective; turns any Gloo failure into a CommError (see fail()).
  template <typename F>
  void run(const char* op, uint32_t seq, Timeout timeout, F&& f) {
    check_usable(op);
    if (ctx_) ctx_->setTimeout(timeout);
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      std::vector<int> all;
      for (int r = 0; r < size(); ++r) all.push_back(r);
      fail(op, seq, /*collective=*/true, all, timeout, e.what());
    }
  }

  // Gloo allreduce of `numel` elements from `in` into `out` (which may be `in`).
  void allreduce_raw(const void* in, void* data, int64_t numel, DType dtype, ReduceOp op, uint32_t seq,
                     Timeout timeout) {
    if (size() == 1 || numel == 0) return;
    if (is_complex(dtype)) {  // a complex sum is the sum of the real and imaginary parts
      numel *= 2;
      dtype = real_of_complex(dtype);
    }
    gloo::AllreduceOptions opts(ctx_);
    with_element_type(itemsize(dtype), [&](auto zero) {
      using T = decltype(zero);
      if (in != data) opts.setInput(static_cast<T*>(const_cast<void*>(in)), static_cast<size_t>(numel));
      opts.setOutput(static_cast<T*>(data), static_cast<size_t>(numel));
    });
    opts.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t n) {
      reduce_pair(out, a, b, static_cast<int64_t>(n), dtype, op);
    });
    opts.setTag(seq);
    opts.setTimeout(timeout);
    gloo::allreduce(opts);
  }

  // Diagnoses a failed op and throws the CommError. `peers`: group ranks the op depended on.
  // `detail`: what did not complete, when known (point to point).
  [[noreturn]] void fail(const char* op, uint32_t seq, bool collective,
                         const std::vector<int>& peers, Timeout timeout, const std::string& cause,
                         const std::string& detail = "") {
    const int me = global_ranks()[rank()];
    std::string what = collective ? absl::StrCat(op, " #", seq) : std::string(op);

    // Members that hit this same failure say so in the store (collectives only: every member runs
    // them). They are victims, not culprits, even if they have exited by the time we look.
    auto key = [&](int grank) { return absl::StrCat("fail/", seq, "/", global_ranks()[grank]); };
    const bool notes = collective && store_ != nullptr;
    bool store_ok = notes;
    if (notes) {
      try {
        store_->set(key(rank()), to_bytes(cause));
      } catch (const std::exception&) {
        store_ok = false;  // the store itself failed: report what the pids tell
      }
    }
    auto also_failed = [&](int r) { return store_ok && probe(*store_, key(r)); };

    auto dead_peers = [&] {
      std::vector<std::string> dead;
      for (int r : peers) {
        if (r == rank()) continue;
        const PeerInfo& p = peers_[r];
        if (p.host == host_ && !pid_running(p.pid) && !also_failed(r)) {
          dead.push_back(absl::StrCat("peer rank ", global_ranks()[r], " (pid ", p.pid,
                                      ") is no longer running"));
        }
      }
      return dead;
    };

    std::vector<std::string> dead = dead_peers();
    std::vector<int> silent;
    if (dead.empty() && store_ok) {
      // Wait a short window for the other members' notes: members that never write one did not
      // reach the op. A peer that just died is a zombie or gone by then.
      const Timeout window = std::min(Timeout(500), std::max(Timeout(1), timeout / 4));
      std::vector<std::string> keys;
      for (int r = 0; r < size(); ++r) keys.push_back(key(r));
      try {
        store_->wait(keys, window);
      } catch (const std::exception&) {
        for (int r = 0; r < size(); ++r) {
          if (r != rank() && !also_failed(r)) silent.push_back(global_ranks()[r]);
        }
      }
      dead = dead_peers();
    }

    std::string diagnosis;
    if (!dead.empty()) {
      diagnosis = absl::StrJoin(dead, "; ");
    } else if (!silent.empty()) {
      diagnosis =
          absl::StrCat(ranks_phrase(silent), " did not enter ", what, " within ", timeout.count(),
                       " ms (alive but silent, or slower than the timeout)");
    } else {
      std::vector<int> local, remote;
      for (int r : peers) {
        if (r == rank()) continue;
        (peers_[r].host == host_ ? local : remote).push_back(global_ranks()[r]);
      }
      if (!collective && remote.empty()) {
        diagnosis = absl::StrCat(ranks_phrase(local), (local.size() == 1 ? " is" : " are"),
                                 " alive: no matching operation was posted, or it is slower than "
                                 "the timeout");
      } else if (remote.empty()) {
        diagnosis = "no peer is known dead or silent";
      } else {
        diagnosis = absl::StrCat("no peer on this host is dead; ", ranks_phrase(remote),
                                 " on other hosts could not be checked");
      }
    }
    if (!detail.empty()) diagnosis = absl::StrCat(detail, "; ", diagnosis);
    std::string msg = absl::StrCat(what, " on ", describe(), " failed on rank ", me, " (timeout ",
                                   timeout.count(), " ms): ", diagnosis, " [gloo: ", cause, "]");
    broken_ = absl::StrCat("after an earlier failure: ", msg);
    throw CommError(msg);
  }

  std::shared_ptr<Store> base_store_;   // outlives store_, which refers to it
  std::unique_ptr<Store> store_;        // this group's prefix of the store
  std::vector<PeerInfo> peers_;         // per group rank
  std::shared_ptr<gloo::Context> ctx_;  // null for a group of one
  std::string host_;
  uint32_t next_seq_ = 0;
  std::string broken_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

std::shared_ptr<Store> open_store(const std::string& spec) {
  if (spec.rfind("file:", 0) == 0) {
    std::string dir = spec.substr(5);
    if (dir.rfind("//", 0) == 0) dir = dir.substr(2);  // file:///abs/path
    DT_CHECK(!dir.empty(), "store spec '", spec, "': empty directory; expected file:/path/to/dir");
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      throw CommError(absl::StrCat("store spec '", spec, "': cannot create directory ", dir, ": ",
                                   ec ? ec.message() : "not a directory"));
    }
    try {
      return std::make_shared<EscapingStore>(
          std::make_unique<PollingStore<gloo::rendezvous::FileStore>>(dir));
    } catch (const std::exception& e) {
      throw CommError(absl::StrCat("store spec '", spec, "': ", e.what()));
    }
  }
  if (spec.rfind("redis://", 0) == 0) {
    std::string rest = spec.substr(8);
    while (!rest.empty() && rest.back() == '/') rest.pop_back();
    std::string host = rest;
    int port = 6379;
    size_t colon = rest.rfind(':');
    if (colon != std::string::npos) {
      host = rest.substr(0, colon);
      DT_CHECK(absl::SimpleAtoi(rest.substr(colon + 1), &port) && port > 0 && port < 65536,
               "store spec '", spec, "': bad port; expected redis://host:port");
    }
    DT_CHECK(!host.empty(), "store spec '", spec, "': empty host; expected redis://host:port");
    // Probe first: Gloo's RedisStore throws on a failed connection without freeing its hiredis
    // context (a leak LeakSanitizer reports), so an unreachable server is found here instead.
    {
      const timeval tv{5, 0};
      redisContext* probe = redisConnectWithTimeout(host.c_str(), port, tv);
      const std::string why = probe == nullptr ? "out of memory" : probe->err != 0 ? probe->errstr : "";
      if (probe != nullptr) redisFree(probe);
      if (!why.empty())
        throw CommError(absl::StrCat("store spec '", spec, "': cannot connect to Redis at ", host, ":", port, ": ",
                                     why));
    }
    try {
      return std::make_shared<EscapingStore>(
          std::make_unique<PollingStore<gloo::rendezvous::RedisStore>>(host, port));
    } catch (const std::exception& e) {
      throw CommError(absl::StrCat("store spec '", spec, "': cannot connect to Redis at ", host,
                                   ":", port, ": ", e.what()));
    }
  }
  DT_FAIL("store spec '", spec,
          "' not understood; expected file:/path/to/dir or redis://host:port");
}

GlooBackend::GlooBackend(int rank, int world_size, const std::string& store_spec,
                         const std::string& host, Timeout timeout, int restart)
    : rank_(rank), world_size_(world_size), store_spec_(store_spec) {
  DT_CHECK(world_size >= 1, "GlooBackend: world_size ", world_size, " must be >= 1");
  DT_CHECK(rank >= 0 && rank < world_size, "GlooBackend: rank ", rank, " outside [0, ", world_size,
           ")");
  // A write to a dead peer's socket must be an error, not a SIGPIPE that kills this process.
  struct sigaction old {};
  if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) signal(SIGPIPE, SIG_IGN);

  store_ = open_store(store_spec);

  std::string where = host;
  if (where.empty()) {
    const char* env = std::getenv("DTENSOR_GLOO_HOST");
    where = env && *env ? env : "127.0.0.1";
  }
  gloo::transport::tcp::attr attr;
  if (where.rfind("iface:", 0) == 0) {
    attr.iface = where.substr(6);
  } else {
    attr.hostname = where;
  }
  try {
    device_ = gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw CommError(absl::StrCat("GlooBackend rank ", rank, ": cannot create a TCP device on '",
                                 where, "': ", e.what()));
  }

  std::vector<int> all(world_size);
  for (int r = 0; r < world_size; ++r) all[r] = r;
  gloo::rendezvous::PrefixStore start("world", *store_);
  const std::string what = absl::StrCat("the world of ", world_size, " ranks (store ", store_spec, ")");
  if (restart == 0) {
    peers_ = join(start, all, rank, timeout, what);
  } else {
    // Restarted: the world's entries exist (a key is written once), this rank's being its dead
    // predecessor's; read them all and put this process in its place.
    peers_ = read_peers(start, all, rank, timeout, what);
    peers_[rank] = PeerInfo{this_host(), static_cast<int>(getpid())};
  }
}

GlooBackend::~GlooBackend() { close(); }

void GlooBackend::close() {
  for (const std::weak_ptr<ProcessGroup>& w : groups_)
    if (std::shared_ptr<ProcessGroup> g = w.lock()) static_cast<GlooGroup&>(*g).close();
  groups_.clear();
  device_.reset();  // the last owner now that no context holds it: its loop thread is joined here
}

std::shared_ptr<ProcessGroup> GlooBackend::new_group(const std::vector<int>& global_ranks,
                                                     const std::string& name, Timeout timeout) {
  DT_CHECK(!global_ranks.empty(), "new_group '", name, "': no ranks");
  DT_CHECK(device_ != nullptr, "new_group '", name, "': the process group was destroyed (destroy_process_group); "
           "init_process_group starts a new one");
  std::set<int> seen;
  int my_index = -1;
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    int r = global_ranks[i];
    DT_CHECK(r >= 0 && r < world_size_, "new_group '", name, "': rank ", r, " outside [0, ",
             world_size_, ")");
    DT_CHECK(seen.insert(r).second, "new_group '", name, "': rank ", r, " listed twice");
    if (r == rank_) my_index = static_cast<int>(i);
  }
  DT_CHECK(my_index >= 0, "new_group '", name, "': rank ", rank_, " is not one of [",
           absl::StrJoin(global_ranks, ", "), "]");

  const int generation = group_generations_[name]++;
  std::string prefix = absl::StrCat("group/", name, "#", generation);
  auto store = std::make_unique<gloo::rendezvous::PrefixStore>(prefix, *store_);
  std::string what =
      absl::StrCat("group '", name, "' ranks [", absl::StrJoin(global_ranks, ", "), "]");
  std::vector<PeerInfo> peers = join(*store, global_ranks, rank_, timeout, what);

  std::shared_ptr<gloo::Context> ctx;
  if (global_ranks.size() > 1) {
    auto rctx = std::make_shared<gloo::rendezvous::Context>(my_index,
                                                            static_cast<int>(global_ranks.size()));
    rctx->setTimeout(timeout);
    try {
      rctx->connectFullMesh(*store, device_);
    } catch (const std::exception& e) {
      throw CommError(absl::StrCat("new_group: connecting ", what, " failed on rank ", rank_,
                                   " within ", timeout.count(), " ms: ", e.what()));
    }
    ctx = rctx;
  }
  auto group = std::make_shared<GlooGroup>(name, my_index, global_ranks, store_, std::move(store),
                                           std::move(peers), std::move(ctx));
  // Forget the groups already gone (a long run makes and drops many).
  std::erase_if(groups_, [](const std::weak_ptr<ProcessGroup>& w) { return w.expired(); });
  groups_.push_back(group);
  return group;
}

}  // namespace dtensor
