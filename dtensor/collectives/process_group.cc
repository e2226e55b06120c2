#include "dtensor/collectives/process_group.h"

#include <atomic>
#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"

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

const char* comm_kind_name(CommKind k) {
  static const char* names[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast",
                                "send_recv", "barrier"};
  return names[static_cast<int>(k)];
}

std::string ProcessGroup::describe() const {
  return absl::StrCat("group '", name_, "' ranks [", absl::StrJoin(global_ranks_, ", "), "]");
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  DT_CHECK(t.defined(), op, " on ", describe(), ": undefined tensor");
  DT_CHECK(t.is_contiguous(), op, " on ", describe(), ": tensor ", t.str(),
           " must be contiguous");
  DT_CHECK(t.device().is_cpu(), op, " on ", describe(), ": tensor on ", t.device().str(),
           "; this backend takes cpu tensors");
}

void ProcessGroup::check_counts(const char* op, const std::vector<int64_t>& counts) const {
  DT_CHECK(static_cast<int>(counts.size()) == size(), op, " on ", describe(), ": ", counts.size(),
           " counts for ", size(), " ranks");
  for (int64_t c : counts) DT_CHECK(c >= 0, op, " on ", describe(), ": negative count ", c);
}

void ProcessGroup::all_reduce(const Tensor& in, Tensor& out, ReduceOp op, Timeout timeout) {
  // The device check is the in-place form's (each backend takes its own kind of memory).
  DT_CHECK(out.defined() && out.is_contiguous(), "all_reduce on ", describe(), ": output ",
           out.defined() ? out.str() : std::string("undefined"), " must be a contiguous tensor");
  if (out.data_ptr() != in.data_ptr()) out.copy_(in);
  all_reduce(out, op, timeout);
}

bool ProcessGroup::stage_p2p(std::vector<P2POp>& ops, Device home, Timeout timeout) {
  bool any = false;
  for (const P2POp& op : ops) any = any || away(op.tensor, home);
  if (!any) return false;
  std::vector<P2POp> local = ops;
  for (P2POp& op : local) op.tensor = staged(op.tensor, home);
  batch_isend_irecv(local, timeout);
  for (size_t i = 0; i < ops.size(); ++i)
    if (ops[i].kind == P2POp::kRecv && away(ops[i].tensor, home)) ops[i].tensor.copy_(local[i].tensor);
  return true;
}

void ProcessGroup::send(const Tensor& t, int dst, int tag, Timeout timeout) {
  std::vector<P2POp> ops{{P2POp::kSend, t, dst, tag}};
  batch_isend_irecv(ops, timeout);
}

void ProcessGroup::recv(Tensor& t, int src, int tag, Timeout timeout) {
  std::vector<P2POp> ops{{P2POp::kRecv, t, src, tag}};
  batch_isend_irecv(ops, timeout);
}

}  // namespace dtensor
