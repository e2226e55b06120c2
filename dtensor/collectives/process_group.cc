#include "dtensor/collectives/process_group.h"

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/limits.h"

namespace dtensor {
namespace {

// Milliseconds; 0 while set_default_timeout has not been called.
std::atomic<int64_t> g_default_timeout_ms{0};

}  // namespace

void set_default_timeout(Timeout t) {
  DT_CHECK(t.count() > 0 && t <= kMaxTimeout, "collective timeout of ", t.count(), " ms is not accepted; give ",
           "a duration > 0 and at most ", kMaxTimeout.count() / 1000, " s");
  g_default_timeout_ms.store(t.count(), std::memory_order_relaxed);
}

Timeout default_timeout() {
  if (int64_t ms = g_default_timeout_ms.load(std::memory_order_relaxed); ms > 0) return Timeout(ms);
  const char* env = std::getenv("DTENSOR_TIMEOUT");
  if (env == nullptr || *env == '\0') return kDefaultTimeout;
  double seconds = 0;
  const double max_s = static_cast<double>(kMaxTimeout.count()) / 1000;
  DT_CHECK(absl::SimpleAtod(env, &seconds) && std::isfinite(seconds) && seconds > 0 && seconds <= max_s,
           "DTENSOR_TIMEOUT='", env, "' is not accepted; give the collective timeout in seconds, a number > 0 ",
           "and at most ", max_s);
  return Timeout(std::max<int64_t>(1, static_cast<int64_t>(std::llround(seconds * 1000))));
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
  }
  return "?";
}

std::string ProcessGroup::describe() const {
  return absl::StrCat("group '", name_, "' ranks [", absl::StrJoin(global_ranks_, ", "), "]");
}

// ---------------------------------------------------------------------------------------------
// Argument checks, shared by every backend.

void ProcessGroup::check_tensor(const char* op, const char* which, const Tensor& t) const {
  DT_CHECK(t.defined(), op, " on ", describe(), ": ", which, " is an undefined tensor");
}

void ProcessGroup::check_counts(const char* op, const char* which, const std::vector<int64_t>& counts,
                                int64_t numel) const {
  DT_CHECK(static_cast<int>(counts.size()) == size(), op, " on ", describe(), ": ", counts.size(), " ", which,
           " for ", size(), " ranks; give one count per group rank");
  int64_t total = 0;
  for (int64_t c : counts) {
    DT_CHECK(c >= 0, op, " on ", describe(), ": negative count ", c, " in ", which, " [",
             absl::StrJoin(counts, ", "), "]");
    total = checked_add(total, c, op);
  }
  if (numel >= 0)
    DT_CHECK(total == numel, op, " on ", describe(), ": ", which, " [", absl::StrJoin(counts, ", "), "] sum to ",
             total, " elements; the tensor has ", numel);
}

namespace {

// Complex numbers have no order: max/min of complex is refused before any rank communicates.
void check_reduce_dtype(const char* op, const std::string& group, const Tensor& in, ReduceOp rop) {
  DT_CHECK(!is_complex(in.dtype()) || rop == ReduceOp::kSum || rop == ReduceOp::kAvg, op, " on ", group, ": ",
           reduce_op_name(rop), " of ", dtype_name(in.dtype()), " input ", in.str(),
           " is not defined (complex numbers have no order); accepted for complex: sum, avg");
}

void check_same_dtype(const char* op, const std::string& group, const Tensor& in, const Tensor& out) {
  DT_CHECK(in.dtype() == out.dtype(), op, " on ", group, ": input ", in.str(), " and output ", out.str(),
           " differ in dtype; they must match");
}

// Whether two tensors' element spans (first to last byte, strides taken as they are) share memory.
bool overlaps(const Tensor& a, const Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0 || a.storage() != b.storage()) return false;
  auto span = [](const Tensor& t) {
    int64_t last = 0;
    for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
    const char* p = static_cast<const char*>(t.data_ptr());
    return std::make_pair(p, p + (last + 1) * static_cast<int64_t>(t.element_size()));
  };
  auto [a0, a1] = span(a);
  auto [b0, b1] = span(b);
  return a0 < b1 && b0 < a1;
}

bool home_ready(const Tensor& t, Device home) { return t.device() == home && t.is_contiguous(); }

Tensor home_copy(const Tensor& t, Device home) { return t.to(home).contiguous(); }

}  // namespace

template <typename Call>
void ProcessGroup::staged(const Tensor& in, Tensor& out, Call call) {
  const Device h = home();
  const bool same = in.defined() && out.defined() && in.data_ptr() == out.data_ptr() && in.sizes() == out.sizes() &&
                    in.strides() == out.strides();
  if (home_ready(in, h) && home_ready(out, h)) {
    call(in, out);
    return;
  }
  Tensor out_home = home_ready(out, h) ? out : home_copy(out, h);
  const Tensor in_home = same ? out_home : home_ready(in, h) ? in : home_copy(in, h);
  call(in_home, out_home);
  if (out_home.data_ptr() != out.data_ptr()) out.copy_(out_home);
}

// ---------------------------------------------------------------------------------------------
// The front.

void ProcessGroup::all_reduce(Tensor& t, ReduceOp op, Timeout timeout) { all_reduce(t, t, op, timeout); }

void ProcessGroup::all_reduce(const Tensor& in, Tensor& out, ReduceOp op, Timeout timeout) {
  const char* name = "all_reduce";
  check_tensor(name, "input", in);
  check_tensor(name, "output", out);
  check_same_dtype(name, describe(), in, out);
  check_reduce_dtype(name, describe(), in, op);
  DT_CHECK(in.numel() == out.numel(), name, " on ", describe(), ": input ", in.str(), " and output ", out.str(),
           " differ in element count; they must match");
  count(CommKind::kAllReduce, comm_bytes_sent(CommKind::kAllReduce, static_cast<int64_t>(out.nbytes()), size()));
  staged(in, out, [&](const Tensor& i, Tensor& o) { do_all_reduce(i, o, op, timeout); });
}

void ProcessGroup::all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, Timeout timeout) {
  const char* name = "all_gather";
  check_tensor(name, "input", in);
  check_tensor(name, "output", out);
  check_same_dtype(name, describe(), in, out);
  check_counts(name, "counts", counts, out.numel());
  DT_CHECK(in.numel() == counts[rank_], name, " on ", describe(), ": input has ", in.numel(), " elements, counts[",
           rank_, "] = ", counts[rank_]);
  count(CommKind::kAllGather, comm_bytes_sent(CommKind::kAllGather, static_cast<int64_t>(out.nbytes()), size()));
  staged(in, out, [&](const Tensor& i, Tensor& o) { do_all_gather(i, o, counts, timeout); });
}

void ProcessGroup::reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                                  Timeout timeout) {
  const char* name = "reduce_scatter";
  check_tensor(name, "input", in);
  check_tensor(name, "output", out);
  check_same_dtype(name, describe(), in, out);
  check_reduce_dtype(name, describe(), in, op);
  check_counts(name, "counts", counts, in.numel());
  DT_CHECK(out.numel() == counts[rank_], name, " on ", describe(), ": output has ", out.numel(),
           " elements, counts[", rank_, "] = ", counts[rank_]);
  DT_CHECK(!overlaps(in, out), name, " on ", describe(), ": output ", out.str(), " overlaps input ", in.str(),
           "; give an output that does not share memory with the input");
  count(CommKind::kReduceScatter,
        comm_bytes_sent(CommKind::kReduceScatter, static_cast<int64_t>(in.nbytes()), size()));
  staged(in, out, [&](const Tensor& i, Tensor& o) { do_reduce_scatter(i, o, counts, op, timeout); });
}

void ProcessGroup::all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                              const std::vector<int64_t>& recv_counts, Timeout timeout) {
  const char* name = "all_to_all";
  check_tensor(name, "input", in);
  check_tensor(name, "output", out);
  check_same_dtype(name, describe(), in, out);
  check_counts(name, "send_counts", send_counts, in.numel());
  check_counts(name, "recv_counts", recv_counts, out.numel());
  DT_CHECK(send_counts[rank_] == recv_counts[rank_], name, " on ", describe(), ": send_counts[", rank_,
           "] = ", send_counts[rank_], " but recv_counts[", rank_, "] = ", recv_counts[rank_],
           "; what a rank keeps must be what it receives from itself");
  const int64_t to_others = in.numel() - send_counts[rank_];
  count(CommKind::kAllToAll, to_others * static_cast<int64_t>(in.element_size()));
  staged(in, out,
         [&](const Tensor& i, Tensor& o) { do_all_to_all(i, send_counts, o, recv_counts, timeout); });
}

void ProcessGroup::broadcast(Tensor& t, int root, Timeout timeout) {
  const char* name = "broadcast";
  check_tensor(name, "tensor", t);
  DT_CHECK(root >= 0 && root < size(), name, " on ", describe(), ": root ", root, " is not a group rank (0..",
           size() - 1, ")");
  count(CommKind::kBroadcast,
        rank_ == root ? comm_bytes_sent(CommKind::kBroadcast, static_cast<int64_t>(t.nbytes()), size()) : 0);
  staged(t, t, [&](const Tensor&, Tensor& o) { do_broadcast(o, root, timeout); });
}

bool ProcessGroup::p2p_ready(const Tensor& t) const { return t.is_contiguous() && p2p_moves(t.device()); }

void ProcessGroup::batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout) {
  const char* name = "batch_isend_irecv";
  int64_t sent = 0;
  bool all_home = true;
  for (const P2POp& p : ops) {
    check_tensor(name, p.kind == P2POp::kSend ? "a send" : "a receive", p.tensor);
    DT_CHECK(p.peer >= 0 && p.peer < size() && p.peer != rank_, name, " on ", describe(), ": peer ", p.peer,
             " is not another group rank (0..", size() - 1, ", not ", rank_, ")");
    if (p.kind == P2POp::kSend) sent += static_cast<int64_t>(p.tensor.nbytes());
    all_home = all_home && p2p_ready(p.tensor);
  }
  count(CommKind::kSendRecv, sent);
  if (all_home) {
    do_batch_isend_irecv(ops, timeout);
    return;
  }
  std::vector<P2POp> local = ops;
  for (P2POp& p : local)
    if (!p2p_ready(p.tensor)) p.tensor = home_copy(p.tensor, home());
  do_batch_isend_irecv(local, timeout);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == P2POp::kRecv && local[i].tensor.data_ptr() != ops[i].tensor.data_ptr())
      ops[i].tensor.copy_(local[i].tensor);
}

void ProcessGroup::send(const Tensor& t, int dst, int tag, Timeout timeout) {
  std::vector<P2POp> ops{{P2POp::kSend, t, dst, tag}};
  batch_isend_irecv(ops, timeout);
}

void ProcessGroup::recv(Tensor& t, int src, int tag, Timeout timeout) {
  std::vector<P2POp> ops{{P2POp::kRecv, t, src, tag}};
  batch_isend_irecv(ops, timeout);
}

void ProcessGroup::barrier(Timeout timeout) {
  count(CommKind::kBarrier, 0);
  do_barrier(timeout);
}

}  // namespace dtensor
