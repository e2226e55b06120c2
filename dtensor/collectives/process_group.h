// The collective interface every backend implements (in-process threads, Gloo, later NCCL).
//
// A ProcessGroup is an ordered set of ranks ("group ranks" 0..size()-1) that run collectives together.
// Every call is blocking and collective (all members call it in the same order, with matching
// arguments) unless noted, and ends within `timeout` — with a dtensor::CommError that names the op,
// the group and the rank(s) that failed — never hangs.
//
// The public calls are one non-virtual front shared by every backend: it checks the arguments
// (dtensor::Error naming the op, the group and what is accepted), counts the bytes this rank sends
// (comm_bytes_sent, comm_kind.h), and stages tensors that are not contiguous or not on the backend's
// home device (the cpu for threads and Gloo, the rank's GPU for NCCL) through a contiguous home copy,
// copying results back. A backend implements only the protected do_* calls on validated, contiguous
// home-device tensors.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtensor/collectives/comm_kind.h"
#include "dtensor/core/tensor.h"

namespace dtensor {

enum class ReduceOp : uint8_t { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);  // "sum", "avg", "max", "min"

using Timeout = std::chrono::milliseconds;
inline constexpr Timeout kDefaultTimeout{std::chrono::minutes(5)};

// The timeout of every collective, mesh and backend start that is given none: set_default_timeout's
// value if it was called, else $DTENSOR_TIMEOUT (seconds, a number > 0, fractions allowed) when set,
// else kDefaultTimeout (5 min). So any rank, whatever launched it, can bound how long it waits for a
// stopped or lost peer. Throws dtensor::Error when $DTENSOR_TIMEOUT is not a number > 0 or is above
// kMaxTimeout.
Timeout default_timeout();
// Sets the process-wide default (`dtensor train --timeout`). Throws dtensor::Error outside
// (0, kMaxTimeout].
void set_default_timeout(Timeout t);
inline constexpr Timeout kMaxTimeout{std::chrono::hours(24)};

// One point-to-point operation of a batch.
struct P2POp {
  enum Kind : uint8_t { kSend, kRecv } kind;
  Tensor tensor;  // contiguous; a recv writes into it
  int peer;       // group rank
  int tag = 0;
};

// What a rank has sent through a group, for tests and the `collectives used` reports.
struct CommStats {
  int64_t calls = 0;
  int64_t bytes_sent = 0;
  int64_t calls_by_kind[kNumCommKinds] = {};
  int64_t of(CommKind k) const { return calls_by_kind[static_cast<int>(k)]; }
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  int rank() const { return rank_; }  // this rank within the group
  int size() const { return static_cast<int>(global_ranks_.size()); }
  // Global rank of each group rank.
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::string& name() const { return name_; }
  // e.g. "group 'mesh0/dim1' ranks [0, 2]".
  std::string describe() const;
  const CommStats& stats() const { return stats_; }
  // Where the transport reads and writes memory (cpu; NCCL: its GPU). Tensors elsewhere are staged
  // through copies there; code that keeps its buffers on home() avoids them.
  virtual Device home() const { return cpu(); }
  // True when batch_isend_irecv/send/recv move tensors on `d` as they are (contiguous), without
  // staging them through home(): home() itself by default; thread ranks (one process) move tensors
  // on any device, their messages being tensors (threads_backend.h).
  virtual bool p2p_moves(const Device& d) const { return d == home(); }

  // In place: every rank ends with op over all ranks' `t` (avg = sum / size; integer avg truncates).
  // dtype: any. Bytes counted: comm_bytes_sent(kAllReduce, t.nbytes(), size()).
  void all_reduce(Tensor& t, ReduceOp op, Timeout timeout = default_timeout());
  // Out of place: `out` (same numel and dtype as `in`) receives op over all ranks' `in`; `in` is not
  // written. Same bytes as the in-place form.
  void all_reduce(const Tensor& in, Tensor& out, ReduceOp op, Timeout timeout = default_timeout());
  // `out` (numel = sum of counts, same dtype) receives the ranks' `in` buffers concatenated in rank
  // order; the sizes may differ between ranks (all_gatherv). `counts[r]` is rank r's element count
  // (in.numel() == counts[rank()]) and must be known to every rank. Bytes: of `out`.
  void all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                  Timeout timeout = default_timeout());
  // `in` holds size() consecutive blocks of counts[r] elements; rank r receives op over all ranks'
  // block r in `out` (numel counts[rank()]); `out` must not share memory with `in` (Error). Bytes:
  // of `in`.
  void reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                      Timeout timeout = default_timeout());
  // `in` holds send_counts[r] elements for each rank r, in order; `out` receives recv_counts[r]
  // from each rank r, in order. recv_counts[r] must equal rank r's send_counts[rank()]. Bytes: the
  // elements sent to other ranks (exact; comm_bytes_sent(kAllToAll) for even splits).
  void all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                  const std::vector<int64_t>& recv_counts, Timeout timeout = default_timeout());
  // `t` of rank `root` (a group rank) is copied into every rank's `t`. Bytes: t on the root, else 0.
  void broadcast(Tensor& t, int root, Timeout timeout = default_timeout());
  // Point to point; not collective. Ops of one batch may complete in any order; the call returns when
  // all have. A send matches the recv of the same (peer, tag) in posting order. Peers are group
  // ranks other than rank(). Bytes: the sends.
  void batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout = default_timeout());
  void send(const Tensor& t, int dst, int tag = 0, Timeout timeout = default_timeout());
  void recv(Tensor& t, int src, int tag = 0, Timeout timeout = default_timeout());
  void barrier(Timeout timeout = default_timeout());

 protected:
  ProcessGroup(std::string name, int rank, std::vector<int> global_ranks)
      : name_(std::move(name)), rank_(rank), global_ranks_(std::move(global_ranks)) {}

  // The backend's collectives. Called by the front with arguments already checked: tensors defined,
  // contiguous, on home(), of equal dtype, numels matching the counts (counts sized size(), >= 0);
  // root and peers in range (peers != rank()). `in` and `out` of do_all_reduce may be one tensor.
  // Bytes are counted by the front. They throw CommError for transport failures and Error when
  // ranks disagree on arguments.
  virtual void do_all_reduce(const Tensor& in, Tensor& out, ReduceOp op, Timeout timeout) = 0;
  virtual void do_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                             Timeout timeout) = 0;
  virtual void do_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                                 ReduceOp op, Timeout timeout) = 0;
  virtual void do_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                             const std::vector<int64_t>& recv_counts, Timeout timeout) = 0;
  virtual void do_broadcast(Tensor& t, int root, Timeout timeout) = 0;
  virtual void do_batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout) = 0;
  virtual void do_barrier(Timeout timeout) = 0;

 private:
  void check_tensor(const char* op, const char* which, const Tensor& t) const;
  bool p2p_ready(const Tensor& t) const;  // batch_isend_irecv takes t as it is (p2p_moves)
  void check_counts(const char* op, const char* which, const std::vector<int64_t>& counts, int64_t numel) const;
  void count(CommKind kind, int64_t bytes) {
    ++stats_.calls;
    ++stats_.calls_by_kind[static_cast<int>(kind)];
    stats_.bytes_sent += bytes;
  }
  // Runs `call(in_home, out_home)` with `in` and `out` as contiguous home-device tensors: a tensor
  // already so is passed as it is; another is copied, and `out`'s copy is copied back afterwards.
  // When `in` and `out` are the same tensor, one copy serves both.
  template <typename Call>
  void staged(const Tensor& in, Tensor& out, Call call);

 protected:
  std::string name_;
  int rank_;
  std::vector<int> global_ranks_;
  CommStats stats_;
};

// Creates groups over the ranks of one "world" (all ranks of a job). Every member of a new group must
// call new_group with the same ranks and name; non-members must not.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;        // global rank
  virtual int world_size() const = 0;
  virtual std::string kind() const = 0;  // "threads", "gloo"
  // global_ranks: sorted or not, distinct, containing rank(). Throws dtensor::CommError if a member
  // does not join within `timeout`, naming it.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks,
                                                  const std::string& name,
                                                  Timeout timeout = default_timeout()) = 0;
  // Numbers the meshes a rank creates, to give their groups matching names on every rank (all ranks
  // create meshes in the same order, as with torch.distributed.new_group).
  int next_mesh_sequence() { return mesh_sequence_++; }

 private:
  int mesh_sequence_ = 0;
};

}  // namespace dtensor
