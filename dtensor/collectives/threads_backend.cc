#include "dtensor/collectives/threads_backend.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "absl/strings/str_join.h"
#include "dtensor/collectives/reduce.h"

namespace dtensor {
namespace {

// What one rank publishes for one collective.
struct Slot {
  const char* op = nullptr;
  const void* in = nullptr;
  void* out = nullptr;
  void* aux = nullptr;
  int64_t numel = 0;
  DType dtype = DType::kFloat32;
  ReduceOp rop = ReduceOp::kSum;
  int root = 0;
  const std::vector<int64_t>* counts = nullptr;
  const std::vector<int64_t>* counts2 = nullptr;
};

struct Message {
  Tensor data;
};

}  // namespace

class ThreadsWorld {
 public:
  explicit ThreadsWorld(int n) : size(n) {}
  const int size;

  std::mutex mu;
  std::condition_variable cv;
  bool aborted = false;
  std::string abort_reason;
  int first_failed_rank = -1;

  struct Group;
  std::map<std::string, std::shared_ptr<Group>> groups;
};

// Shared state of one group: a reusable barrier plus the published slots and the p2p mailboxes.
struct ThreadsWorld::Group {
  explicit Group(int n) : slots(n), arrived(n, false) {}
  std::vector<Slot> slots;
  std::vector<bool> arrived;
  int count = 0;
  uint64_t generation = 0;
  bool broken = false;
  std::string broken_reason;
  // (src, dst, tag) -> queued messages
  std::map<std::tuple<int, int, int>, std::deque<Message>> mailbox;
};

namespace {

class ThreadsGroup : public ProcessGroup {
 public:
  ThreadsGroup(std::shared_ptr<ThreadsWorld> world, std::shared_ptr<ThreadsWorld::Group> g,
               std::string name, int rank, std::vector<int> global_ranks)
      : ProcessGroup(std::move(name), rank, std::move(global_ranks)),
        world_(std::move(world)),
        g_(std::move(g)) {}

  // Waits until every member reached the barrier. `publish` is set as this rank's slot first.
  void barrier_with(const char* op, const Slot* publish, Timeout timeout) {
    std::unique_lock<std::mutex> l(world_->mu);
    check_alive(op);
    if (publish) g_->slots[rank_] = *publish;
    uint64_t my_gen = g_->generation;
    g_->arrived[rank_] = true;
    if (++g_->count == size()) {
      g_->count = 0;
      std::fill(g_->arrived.begin(), g_->arrived.end(), false);
      ++g_->generation;
      world_->cv.notify_all();
      return;
    }
    bool ok = world_->cv.wait_for(l, timeout, [&] {
      return g_->generation != my_gen || world_->aborted || g_->broken;
    });
    if (g_->generation != my_gen) return;
    check_alive(op);
    std::vector<int> missing;
    for (int r = 0; r < size(); ++r)
      if (!g_->arrived[r]) missing.push_back(global_ranks_[r]);
    std::string msg =
        absl::StrCat(op, " on ", describe(), " (rank ", global_ranks_[rank_], "): rank(s) ",
                     absl::StrJoin(missing, ", "), " did not join within ", timeout.count(), " ms");
    (void)ok;
    g_->broken = true;
    g_->broken_reason = msg;
    world_->cv.notify_all();
    throw CommError(msg);
  }

  void do_all_reduce(const Tensor& in, Tensor& t, ReduceOp op, Timeout timeout) override {
    const int n = size();
    const int64_t numel = t.numel();
    const size_t isz = t.element_size();
    // My block of the result, reduced from every rank's input in rank order.
    int64_t chunk = (numel + n - 1) / std::max(n, 1);
    int64_t lo = std::min<int64_t>(numel, chunk * rank_), hi = std::min<int64_t>(numel, lo + chunk);
    Tensor part = Tensor::empty({hi - lo}, t.dtype());
    Slot s{"all_reduce", in.data_ptr(), t.data_ptr(), part.data_ptr(), numel, t.dtype(), op};
    barrier_with("all_reduce", &s, timeout);
    match("all_reduce", [&](const Slot& o) { return o.numel == numel && o.dtype == t.dtype() && o.rop == op; },
          "the same element count, dtype and reduce op");
    if (hi > lo) {
      std::memcpy(part.data_ptr(), static_cast<const char*>(g_->slots[0].in) + lo * isz,
                  (hi - lo) * isz);
      for (int r = 1; r < n; ++r)
        reduce_into(part.data_ptr(), static_cast<const char*>(g_->slots[r].in) + lo * isz, hi - lo,
                    t.dtype(), op);
      if (op == ReduceOp::kAvg) finish_avg(part.data_ptr(), hi - lo, t.dtype(), n);
    }
    barrier_with("all_reduce", nullptr, timeout);  // everyone finished reading inputs
    for (int r = 0; r < n; ++r) {
      int64_t rlo = std::min<int64_t>(numel, chunk * r), rhi = std::min<int64_t>(numel, rlo + chunk);
      if (rhi > rlo)
        std::memcpy(static_cast<char*>(t.data_ptr()) + rlo * isz, g_->slots[r].aux, (rhi - rlo) * isz);
    }
    barrier_with("all_reduce", nullptr, timeout);  // everyone finished reading the parts
  }

  void do_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                     Timeout timeout) override {
    Slot s{"all_gather", in.data_ptr(), out.data_ptr(), nullptr, in.numel(), in.dtype()};
    s.counts = &counts;
    barrier_with("all_gather", &s, timeout);
    match("all_gather", [&](const Slot& o) { return o.dtype == in.dtype() && *o.counts == counts; },
          "the same dtype and counts");
    const size_t isz = in.element_size();
    int64_t at = 0;
    for (int r = 0; r < size(); ++r) {
      std::memcpy(static_cast<char*>(out.data_ptr()) + at * isz, g_->slots[r].in, counts[r] * isz);
      at += counts[r];
    }
    barrier_with("all_gather", nullptr, timeout);
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                         ReduceOp op, Timeout timeout) override {
    int64_t my_off = 0;
    for (int r = 0; r < rank_; ++r) my_off += counts[r];
    Slot s{"reduce_scatter", in.data_ptr(), out.data_ptr(), nullptr, in.numel(), in.dtype(), op};
    s.counts = &counts;
    barrier_with("reduce_scatter", &s, timeout);
    match("reduce_scatter",
          [&](const Slot& o) { return o.dtype == in.dtype() && *o.counts == counts && o.rop == op; },
          "the same dtype, counts and reduce op");
    const size_t isz = in.element_size();
    const int64_t n = counts[rank_];
    if (n > 0) {
      std::memcpy(out.data_ptr(), static_cast<const char*>(g_->slots[0].in) + my_off * isz, n * isz);
      for (int r = 1; r < size(); ++r)
        reduce_into(out.data_ptr(), static_cast<const char*>(g_->slots[r].in) + my_off * isz, n,
                    in.dtype(), op);
      if (op == ReduceOp::kAvg) finish_avg(out.data_ptr(), n, in.dtype(), size());
    }
    barrier_with("reduce_scatter", nullptr, timeout);
  }

  void do_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                     const std::vector<int64_t>& recv_counts, Timeout timeout) override {
    Slot s{"all_to_all", in.data_ptr(), out.data_ptr(), nullptr, in.numel(), in.dtype()};
    s.counts = &send_counts;
    s.counts2 = &recv_counts;
    barrier_with("all_to_all", &s, timeout);
    match("all_to_all", [&](const Slot& o) { return o.dtype == in.dtype(); }, "the same dtype");
    // Every rank checks the whole send/recv matrix, so a mismatch fails all of them alike.
    for (int r = 0; r < size(); ++r)
      for (int q = 0; q < size(); ++q) {
        int64_t sends = (*g_->slots[r].counts)[q], expects = (*g_->slots[q].counts2)[r];
        DT_CHECK(sends == expects, "all_to_all on ", describe(), ": rank ", global_ranks_[r],
                 " sends ", sends, " elements to rank ", global_ranks_[q], " which expects ",
                 expects);
      }
    const size_t isz = in.element_size();
    int64_t at = 0;
    for (int r = 0; r < size(); ++r) {
      const auto& sc = *g_->slots[r].counts;
      int64_t off = 0;
      for (int k = 0; k < rank_; ++k) off += sc[k];
      std::memcpy(static_cast<char*>(out.data_ptr()) + at * isz,
                  static_cast<const char*>(g_->slots[r].in) + off * isz, recv_counts[r] * isz);
      at += recv_counts[r];
    }
    barrier_with("all_to_all", nullptr, timeout);
  }

  void do_broadcast(Tensor& t, int root, Timeout timeout) override {
    Slot s{"broadcast", t.data_ptr(), t.data_ptr(), nullptr, t.numel(), t.dtype()};
    s.root = root;
    barrier_with("broadcast", &s, timeout);
    match("broadcast",
          [&](const Slot& o) { return o.numel == t.numel() && o.dtype == t.dtype() && o.root == root; },
          "the same element count, dtype and root");
    if (rank_ != root) std::memcpy(t.data_ptr(), g_->slots[root].in, t.nbytes());
    barrier_with("broadcast", nullptr, timeout);
  }

  // A message is a clone of the sent tensor on its device, copied into the receive buffer by the
  // receiver: no host staging for device tensors. Device work of thread ranks is ordered by the
  // device's stream, which they share (dtensor::cuda::current_stream's default, the legacy stream):
  // the clone is queued before the message is posted, the copy after it is taken.
  bool p2p_moves(const Device&) const override { return true; }

  void do_batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout) override {
    std::unique_lock<std::mutex> l(world_->mu);
    check_alive("batch_isend_irecv");
    for (P2POp& op : ops)
      if (op.kind == P2POp::kSend) g_->mailbox[{rank_, op.peer, op.tag}].push_back({op.tensor.clone()});
    world_->cv.notify_all();
    for (P2POp& op : ops) {
      if (op.kind != P2POp::kRecv) continue;
      auto& q = g_->mailbox[{op.peer, rank_, op.tag}];
      bool ok = world_->cv.wait_for(l, timeout, [&] { return !q.empty() || world_->aborted; });
      check_alive("recv");
      if (!ok)
        throw CommError(absl::StrCat("recv on ", describe(), " (rank ", global_ranks_[rank_],
                                     "): rank ", global_ranks_[op.peer], " sent nothing with tag ",
                                     op.tag, " within ", timeout.count(), " ms"));
      Tensor msg = std::move(q.front().data);
      q.pop_front();
      DT_CHECK(msg.numel() == op.tensor.numel() && msg.dtype() == op.tensor.dtype(), "recv on ",
               describe(), ": rank ", global_ranks_[op.peer], " sent ", msg.str(),
               " but the receive buffer is ", op.tensor.str());
      op.tensor.copy_(msg.view(op.tensor.sizes()));
    }
  }

  void do_barrier(Timeout timeout) override { barrier_with("barrier", nullptr, timeout); }

 private:
  void check_alive(const char* op) {
    if (world_->aborted)
      throw CommError(absl::StrCat(op, " on ", describe(), ": aborted because ",
                                   world_->abort_reason));
    if (g_->broken)
      throw CommError(absl::StrCat(op, " on ", describe(), ": group broken by an earlier error: ",
                                   g_->broken_reason));
  }

  template <typename Pred>
  void match(const char* op, Pred pred, const char* what) {
    for (int r = 0; r < size(); ++r) {
      if (std::strcmp(g_->slots[r].op, op) != 0 || !pred(g_->slots[r])) {
        // Every rank sees the same mismatch, so all of them throw and none waits.
        DT_FAIL(op, " on ", describe(), ": rank ", global_ranks_[r], " called ",
                g_->slots[r].op, " with different arguments; every rank must pass ", what);
      }
    }
  }

  std::shared_ptr<ThreadsWorld> world_;
  std::shared_ptr<ThreadsWorld::Group> g_;
};

class ThreadsBackend : public Backend {
 public:
  ThreadsBackend(std::shared_ptr<ThreadsWorld> world, int rank)
      : world_(std::move(world)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_->size; }
  std::string kind() const override { return "threads"; }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& name,
                                          Timeout timeout) override {
    auto it = std::find(ranks.begin(), ranks.end(), rank_);
    DT_CHECK(it != ranks.end(), "new_group '", name, "': rank ", rank_, " is not in [",
             absl::StrJoin(ranks, ", "), "]");
    for (int r : ranks)
      DT_CHECK(r >= 0 && r < world_->size, "new_group '", name, "': rank ", r,
               " outside the world of ", world_->size);
    std::string key = absl::StrCat(name, "|", absl::StrJoin(ranks, ","));
    std::shared_ptr<ThreadsWorld::Group> g;
    {
      std::lock_guard<std::mutex> l(world_->mu);
      auto& slot = world_->groups[key];
      if (!slot) slot = std::make_shared<ThreadsWorld::Group>(static_cast<int>(ranks.size()));
      g = slot;
    }
    auto pg = std::make_shared<ThreadsGroup>(world_, g, name, static_cast<int>(it - ranks.begin()),
                                             ranks);
    pg->barrier_with("new_group", nullptr, timeout);  // every member joins, or we name who did not
    return pg;
  }

 private:
  std::shared_ptr<ThreadsWorld> world_;
  int rank_;
};

}  // namespace

std::shared_ptr<ThreadsWorld> make_threads_world(int world_size) {
  DT_CHECK(world_size >= 1, "make_threads_world: world size ", world_size, " must be >= 1");
  return std::make_shared<ThreadsWorld>(world_size);
}

std::shared_ptr<Backend> threads_backend(const std::shared_ptr<ThreadsWorld>& world, int rank) {
  DT_CHECK(rank >= 0 && rank < world->size, "threads_backend: rank ", rank, " outside world of ",
           world->size);
  return std::make_shared<ThreadsBackend>(world, rank);
}

void abort_threads_world(ThreadsWorld& world, int rank, const std::string& reason) {
  std::lock_guard<std::mutex> l(world.mu);
  if (!world.aborted) {
    world.aborted = true;
    world.first_failed_rank = rank;
    world.abort_reason = absl::StrCat("rank ", rank, " failed: ", reason);
  }
  world.cv.notify_all();
}

void run_threads(int world_size, const std::function<void(std::shared_ptr<Backend>)>& fn) {
  DT_CHECK(world_size >= 1 && world_size <= kMaxThreadRanks, "run_threads: ", world_size,
           " thread ranks; accepted: 1 to ", kMaxThreadRanks, " (use processes, e.g. Gloo, for more)");
  auto world = make_threads_world(world_size);
  std::vector<std::exception_ptr> errors(world_size);
  std::vector<std::thread> threads;
  threads.reserve(world_size);
  for (int r = 0; r < world_size; ++r) {
    try {
      threads.emplace_back([&, r] {
      try {
        fn(threads_backend(world, r));
      } catch (const std::exception& e) {
        errors[r] = std::current_exception();
        abort_threads_world(*world, r, e.what());
      } catch (...) {
        errors[r] = std::current_exception();
        abort_threads_world(*world, r, "unknown exception");
      }
      });
    } catch (const std::system_error& e) {
      // The system refused another thread: stop the ranks already running, then report it.
      abort_threads_world(*world, r, absl::StrCat("could not start thread rank ", r, ": ", e.what()));
      for (auto& t : threads) t.join();
      DT_FAIL("run_threads: could not start thread rank ", r, " of ", world_size, ": ", e.what());
    }
  }
  for (auto& t : threads) t.join();
  if (world->first_failed_rank >= 0) std::rethrow_exception(errors[world->first_failed_rank]);
}

}  // namespace dtensor
