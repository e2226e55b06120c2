#include "dtensor/collectives/nccl_backend.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/collectives/env.h"
#include "dtensor/collectives/reduce.h"
#include "dtensor/collectives/store_util.h"
#include "dtensor/core/cuda/cuda_storage.h"
#include "dtensor/core/cuda/cuda_util.h"
#include "gloo/rendezvous/prefix_store.h"
#include "gloo/rendezvous/store.h"

namespace dtensor {
namespace {

using Clock = std::chrono::steady_clock;
using ::dtensor::cuda::DeviceGuard;
using gloo::rendezvous::Store;

std::string nccl_error(ncclResult_t r, ncclComm_t comm) {
  std::string s = absl::StrCat(ncclGetErrorString(r), " (", static_cast<int>(r), ")");
  if (comm != nullptr) {
    const char* last = ncclGetLastError(comm);
    if (last != nullptr && *last != '\0') absl::StrAppend(&s, ": ", last);
  }
  return s;
}

// NCCL has no complex types: a complex tensor moves and sums as twice as many reals of its part type
// (counts passed to NCCL are multiplied by parts()); max/min of complex is refused before this
// (ProcessGroup's front).
size_t parts(DType t) { return is_complex(t) ? 2 : 1; }

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::kComplex64:
      return ncclFloat32;
    case DType::kComplex128:
      return ncclFloat64;
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kInt64:
      return ncclInt64;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt8:
      return ncclInt8;
    case DType::kBool:
    case DType::kUInt8:
      return ncclUint8;
    case DType::kInt16:
      return ncclFloat16;  // NCCL has no 16-bit integer: moved as 2-byte words; reductions widen first
  }
  return ncclUint8;
}

// NCCL's op for `op` on dtype (see the header for bool and integer avg).
ncclRedOp_t nccl_op(ReduceOp op, DType t) {
  if (t == DType::kBool) return op == ReduceOp::kMin ? ncclMin : ncclMax;
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return is_floating(t) || is_complex(t) ? ncclAvg : ncclSum;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
  }
  return ncclSum;
}

bool host_avg(ReduceOp op, DType t) {
  return op == ReduceOp::kAvg && !is_floating(t) && !is_complex(t) && t != DType::kBool;
}

bool all_equal(const std::vector<int64_t>& v) {
  for (int64_t x : v)
    if (x != v[0]) return false;
  return true;
}

// Waits for a non-blocking communicator's pending call (ncclInProgress) to settle.
ncclResult_t settle(ncclComm_t comm, ncclResult_t r, Clock::time_point deadline) {
  while (r == ncclInProgress) {
    if (Clock::now() >= deadline) return ncclInProgress;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm, &async);
    r = async;
  }
  return r;
}

class NcclGroup : public ProcessGroup {
 public:
  NcclGroup(std::string name, int rank, std::vector<int> global_ranks, Device device,
            ncclComm_t comm, std::vector<PeerInfo> peers)
      : ProcessGroup(std::move(name), rank, std::move(global_ranks)),
        device_(device),
        comm_(comm),
        peers_(std::move(peers)),
        host_(store_util::this_host()) {
    DeviceGuard guard(device_.index);
    DT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), describe());
    DT_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), describe());
    DT_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), describe());
  }

  ~NcclGroup() override {
    DeviceGuard guard(device_.index);
    if (comm_ != nullptr) {  // null after a failure: fail() aborted it
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      if (settle(comm_, ncclCommFinalize(comm_), deadline) == ncclSuccess) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }

  Device home() const override { return device_; }

  void do_all_reduce(const Tensor& in, Tensor& t, ReduceOp op, Timeout timeout) override {
    if (t.dtype() == DType::kInt16) {  // reduced as int32; narrowing back wraps as an int16 sum would
      Tensor wide = in.to(DType::kInt32);
      do_all_reduce(wide, wide, op, timeout);
      t.copy_(wide);
      return;
    }
    const char* name = "all_reduce";
    const int n = size();
    run(
        name, timeout,
        [&] {
          return ncclAllReduce(in.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()) * parts(t.dtype()),
                               nccl_type(t.dtype()), nccl_op(op, t.dtype()), comm_, stream_);
        },
        t.numel() == 0);
    if (host_avg(op, t.dtype()) && t.numel() > 0) {
      Tensor h = to_device(t, cpu());
      finish_avg(h.data_ptr(), h.numel(), h.dtype(), n);
      Tensor back = to_device(h, device_);
      DeviceGuard guard(device_.index);
      DT_CUDA_CHECK(cudaMemcpy(t.data_ptr(), back.data_ptr(), t.nbytes(), cudaMemcpyDeviceToDevice),
                    name, " on ", describe());
    }
  }

  void do_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                     Timeout timeout) override {
    const char* name = "all_gather";
    const int n = size();
    const ncclDataType_t type = nccl_type(in.dtype());
    const size_t item = in.element_size();
    run(
        name, timeout,
        [&] {
          if (all_equal(counts)) {
            return ncclAllGather(in.data_ptr(), out.data_ptr(), static_cast<size_t>(counts[0]) * parts(in.dtype()),
                                 type, comm_, stream_);
          }
          ncclGroupStart();
          int64_t offset = 0;
          for (int r = 0; r < n; ++r) {
            if (counts[r] > 0) {
              char* dst = static_cast<char*>(out.data_ptr()) + offset * item;
              ncclBroadcast(r == rank() ? in.data_ptr() : dst, dst, static_cast<size_t>(counts[r]) * parts(in.dtype()),
                            type, r, comm_, stream_);
            }
            offset += counts[r];
          }
          return ncclGroupEnd();
        },
        out.numel() == 0);
  }

  void do_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts,
                         ReduceOp op, Timeout timeout) override {
    if (in.dtype() == DType::kInt16) {  // as in do_all_reduce
      Tensor wide = Tensor::empty(out.sizes(), DType::kInt32, device_);
      do_reduce_scatter(in.to(DType::kInt32), wide, counts, op, timeout);
      out.copy_(wide);
      return;
    }
    const char* name = "reduce_scatter";
    const int n = size();
    const ncclDataType_t type = nccl_type(in.dtype());
    const ncclRedOp_t rop = nccl_op(op, in.dtype());
    const size_t item = in.element_size();
    run(
        name, timeout,
        [&] {
          if (all_equal(counts)) {
            return ncclReduceScatter(in.data_ptr(), out.data_ptr(), static_cast<size_t>(counts[0]) * parts(in.dtype()),
                                     type, rop, comm_, stream_);
          }
          ncclGroupStart();
          int64_t offset = 0;
          for (int r = 0; r < n; ++r) {
            if (counts[r] > 0) {
              const char* src = static_cast<const char*>(in.data_ptr()) + offset * item;
              ncclReduce(src, r == rank() ? out.data_ptr() : nullptr,
                         static_cast<size_t>(counts[r]) * parts(in.dtype()), type, rop, r, comm_, stream_);
            }
            offset += counts[r];
          }
          return ncclGroupEnd();
        },
        in.numel() == 0);
    if (host_avg(op, out.dtype()) && out.numel() > 0) {
      Tensor h = to_device(out, cpu());
      finish_avg(h.data_ptr(), h.numel(), h.dtype(), n);
      Tensor back = to_device(h, device_);
      DeviceGuard guard(device_.index);
      DT_CUDA_CHECK(
          cudaMemcpy(out.data_ptr(), back.data_ptr(), out.nbytes(), cudaMemcpyDeviceToDevice), name,
          " on ", describe());
    }
  }

  void do_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                     const std::vector<int64_t>& recv_counts, Timeout timeout) override {
    const char* name = "all_to_all";
    const ncclDataType_t type = nccl_type(in.dtype());
    const size_t item = in.element_size();
    run(
        name, timeout,
        [&] {
          ncclGroupStart();
          int64_t so = 0, ro = 0;
          for (int r = 0; r < size(); ++r) {
            const char* src = static_cast<const char*>(in.data_ptr()) + so * item;
            char* dst = static_cast<char*>(out.data_ptr()) + ro * item;
            if (r == rank()) {
              if (send_counts[r] > 0)
                cudaMemcpyAsync(dst, src, send_counts[r] * item, cudaMemcpyDeviceToDevice, stream_);
            } else {
              if (send_counts[r] > 0)
                ncclSend(src, static_cast<size_t>(send_counts[r]) * parts(in.dtype()), type, r, comm_, stream_);
              if (recv_counts[r] > 0)
                ncclRecv(dst, static_cast<size_t>(recv_counts[r]) * parts(in.dtype()), type, r, comm_, stream_);
            }
            so += send_counts[r];
            ro += recv_counts[r];
          }
          return ncclGroupEnd();
        },
        false);
  }

  void do_broadcast(Tensor& t, int root, Timeout timeout) override {
    const char* name = "broadcast";
    run(
        name, timeout,
        [&] {
          return ncclBroadcast(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()) * parts(t.dtype()),
                               nccl_type(t.dtype()), root, comm_, stream_);
        },
        t.numel() == 0);
  }

  void do_batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout) override {
    const char* name = "batch_isend_irecv";
    run(
        name, timeout,
        [&] {
          ncclGroupStart();
          for (const P2POp& p : ops) {
            if (p.tensor.numel() == 0) continue;  // both sides skip empty messages
            const size_t n = static_cast<size_t>(p.tensor.numel()) * parts(p.tensor.dtype());
            if (p.kind == P2POp::kSend) {
              ncclSend(p.tensor.data_ptr(), n, nccl_type(p.tensor.dtype()), p.peer, comm_, stream_);
            } else {
              ncclRecv(p.tensor.data_ptr(), n, nccl_type(p.tensor.dtype()), p.peer, comm_, stream_);
            }
          }
          return ncclGroupEnd();
        },
        ops.empty());
  }

  void do_barrier(Timeout timeout) override {
    const char* name = "barrier";
    if (!barrier_buf_.defined()) {
      DeviceGuard guard(device_.index);
      barrier_buf_ = Tensor::empty({1}, DType::kInt32, device_);
    }
    run(
        name, timeout,
        [&] {
          return ncclAllReduce(barrier_buf_.data_ptr(), barrier_buf_.data_ptr(), 1, ncclInt32,
                               ncclSum, comm_, stream_);
        },
        false);
  }

 private:
  void check_usable(const char* op) const {
    if (!broken_.empty()) {
      throw CommError(absl::StrCat(op, " on ", describe(), " (rank ", global_ranks()[rank()],
                                   "): the group is unusable after an earlier failure: ", broken_));
    }
  }

  // Queues `enqueue` (which returns the NCCL status of its calls) on the group's stream after the
  // caller's current stream, and waits for it, bounded by `timeout` (see the header).
  template <typename F>
  void run(const char* op, Timeout timeout, F&& enqueue, bool nothing_to_do) {
    check_usable(op);
    const uint32_t seq = next_seq_++;
    if (nothing_to_do) return;
    DeviceGuard guard(device_.index);
    const auto deadline = Clock::now() + timeout;
    DT_CUDA_CHECK(cudaEventRecord(ready_, ::dtensor::cuda::current_stream(device_.index)), op);
    DT_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_, 0), op);
    ncclResult_t r = settle(comm_, enqueue(), deadline);
    if (r == ncclInProgress) fail(op, seq, timeout, "the operation could not be queued in time");
    if (r != ncclSuccess) fail(op, seq, timeout, absl::StrCat("NCCL: ", nccl_error(r, comm_)));
    DT_CUDA_CHECK(cudaEventRecord(done_, stream_), op);
    for (;;) {
      cudaError_t e = cudaEventQuery(done_);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        cudaGetLastError();
        fail(op, seq, timeout, absl::StrCat("CUDA: ", cudaGetErrorString(e)));
      }
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress)
        fail(op, seq, timeout, absl::StrCat("NCCL: ", nccl_error(async, comm_)));
      if (Clock::now() >= deadline) fail(op, seq, timeout, "did not complete within the timeout");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  [[noreturn]] void fail(const char* op, uint32_t seq, Timeout timeout, const std::string& cause) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    std::vector<std::string> dead;
    for (int r = 0; r < size(); ++r) {
      if (r == rank() || r >= static_cast<int>(peers_.size())) continue;
      const PeerInfo& p = peers_[r];
      if (p.host == host_ && !store_util::pid_running(p.pid))
        dead.push_back(absl::StrCat("peer rank ", global_ranks()[r], " (pid ", p.pid,
                                    ") is no longer running"));
    }
    std::string msg = absl::StrCat(op, " #", seq, " on ", describe(), " failed on rank ",
                                   global_ranks()[rank()], " (timeout ", timeout.count(), " ms): ",
                                   dead.empty() ? std::string("no peer on this host is known dead")
                                                : absl::StrJoin(dead, "; "),
                                   "; the NCCL communicator was aborted [", cause, "]");
    broken_ = msg;
    throw CommError(msg);
  }

  Device device_;
  ncclComm_t comm_;
  std::vector<PeerInfo> peers_;
  std::string host_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  Tensor barrier_buf_;
  uint32_t next_seq_ = 0;
  std::string broken_;
};

}  // namespace

NcclBackend::NcclBackend(int rank, int world_size, int local_rank, const std::string& store_spec,
                         Timeout timeout)
    : rank_(rank),
      world_size_(world_size),
      device_{DeviceType::kCUDA, local_rank},
      store_spec_(store_spec) {
  DT_CHECK(world_size >= 1, "NcclBackend: world_size ", world_size, " must be >= 1");
  DT_CHECK(rank >= 0 && rank < world_size, "NcclBackend: rank ", rank, " outside [0, ", world_size,
           ")");
  ::dtensor::cuda::check_device(device_, "NcclBackend (device = cuda:LOCAL_RANK)");
  ::dtensor::cuda::register_storage_allocator();
  DT_CUDA_CHECK(cudaSetDevice(local_rank), "NcclBackend");
  store_ = open_store(store_spec);
  std::vector<int> all(world_size);
  for (int r = 0; r < world_size; ++r) all[r] = r;
  gloo::rendezvous::PrefixStore start("world", *store_);
  peers_ = store_util::join(
      start, all, rank, timeout,
      absl::StrCat("the world of ", world_size, " ranks (store ", store_spec, ")"));
}

NcclBackend::~NcclBackend() = default;

std::shared_ptr<ProcessGroup> NcclBackend::new_group(const std::vector<int>& global_ranks,
                                                     const std::string& name, Timeout timeout) {
  DT_CHECK(!global_ranks.empty(), "new_group '", name, "': no ranks");
  std::set<int> seen;
  int me = -1;
  for (size_t i = 0; i < global_ranks.size(); ++i) {
    const int r = global_ranks[i];
    DT_CHECK(r >= 0 && r < world_size_, "new_group '", name, "': rank ", r, " outside [0, ",
             world_size_, ")");
    DT_CHECK(seen.insert(r).second, "new_group '", name, "': rank ", r, " listed twice");
    if (r == rank_) me = static_cast<int>(i);
  }
  DT_CHECK(me >= 0, "new_group '", name, "': rank ", rank_, " is not one of [",
           absl::StrJoin(global_ranks, ", "), "]");
  const auto deadline = Clock::now() + timeout;
  const int generation = group_generations_[name]++;
  gloo::rendezvous::PrefixStore store(absl::StrCat("nccl/", name, "#", generation), *store_);
  const std::string what =
      absl::StrCat("NCCL group '", name, "' ranks [", absl::StrJoin(global_ranks, ", "), "]");
  std::vector<PeerInfo> peers = store_util::join(store, global_ranks, rank_, timeout, what);

  // The unique id, from group rank 0 through the store.
  ncclUniqueId id;
  if (me == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw CommError(absl::StrCat("new_group: ncclGetUniqueId for ", what, " failed on rank ",
                                   rank_, ": ", nccl_error(r, nullptr)));
    store.set("nccl_id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
  } else {
    try {
      store.wait({"nccl_id"}, std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::max(deadline - Clock::now(), Clock::duration(0))));
    } catch (const std::exception& e) {
      throw CommError(absl::StrCat("new_group: rank ", global_ranks[0], " (group rank 0) of ", what,
                                   " did not publish the NCCL unique id within ", timeout.count(),
                                   " ms (seen from rank ", rank_, ")"));
    }
    std::vector<char> bytes = store.get("nccl_id");
    DT_CHECK(bytes.size() == sizeof(id.internal), "new_group: malformed NCCL id for ", what);
    std::memcpy(id.internal, bytes.data(), sizeof(id.internal));
  }

  DeviceGuard guard(device_.index);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t r =
      ncclCommInitRankConfig(&comm, static_cast<int>(global_ranks.size()), id, me, &config);
  r = settle(comm, r, deadline);
  if (r != ncclSuccess) {
    if (comm != nullptr) ncclCommAbort(comm);
    throw CommError(
        absl::StrCat("new_group: the NCCL communicator of ", what, " was not ready on rank ", rank_,
                     r == ncclInProgress ? absl::StrCat(" within ", timeout.count(), " ms")
                                         : absl::StrCat(": ", nccl_error(r, nullptr))));
  }
  return std::make_shared<NcclGroup>(name, me, global_ranks, device_, comm, std::move(peers));
}

std::shared_ptr<Backend> init_nccl_backend_from_env(Timeout timeout) {
  ProcessEnv env = read_process_env();
  return std::make_shared<NcclBackend>(env.rank, env.world_size, env.local_rank, env.store,
                                       timeout);
}

}  // namespace dtensor
