// A Backend whose groups move fake-device memory (tests/testing/fake_device.h) the way NCCL moves
// GPU memory: ProcessGroup::home() is the fake device, so device tensors reach the collectives as
// they are and code that keeps its buffers on the device (distributed steps with
// StepDef::runs_on_device) is exercised without a GPU. Each collective decodes its buffers to
// host copies, runs the wrapped backend's (thread ranks') collective on them and encodes the
// results back; a cpu tensor handed to it is staged onto the fake device first, as NCCL stages it
// onto the GPU.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dtensor/collectives/process_group.h"
#include "tests/testing/fake_device.h"

namespace dtensor::testing {

class FakeDeviceGroup : public ProcessGroup {
 public:
  explicit FakeDeviceGroup(std::shared_ptr<ProcessGroup> inner)
      : ProcessGroup(inner->name(), inner->rank(), inner->global_ranks()), inner_(std::move(inner)) {}
  Device home() const override { return fake_cuda(); }

 protected:
  void do_all_reduce(const Tensor& in, Tensor& out, ReduceOp op, Timeout timeout) override {
    Tensor h = in.to(cpu()).contiguous().clone();
    inner_->all_reduce(h, op, timeout);
    out.copy_(h);
  }
  void do_all_gather(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, Timeout timeout) override {
    Tensor h = Tensor::empty(out.sizes(), out.dtype());
    inner_->all_gather(in.to(cpu()).contiguous(), h, counts, timeout);
    out.copy_(h);
  }
  void do_reduce_scatter(const Tensor& in, Tensor& out, const std::vector<int64_t>& counts, ReduceOp op,
                         Timeout timeout) override {
    Tensor h = Tensor::empty(out.sizes(), out.dtype());
    inner_->reduce_scatter(in.to(cpu()).contiguous(), h, counts, op, timeout);
    out.copy_(h);
  }
  void do_all_to_all(const Tensor& in, const std::vector<int64_t>& send_counts, Tensor& out,
                     const std::vector<int64_t>& recv_counts, Timeout timeout) override {
    Tensor h = Tensor::empty(out.sizes(), out.dtype());
    inner_->all_to_all(in.to(cpu()).contiguous(), send_counts, h, recv_counts, timeout);
    out.copy_(h);
  }
  void do_broadcast(Tensor& t, int root, Timeout timeout) override {
    Tensor h = t.to(cpu()).contiguous().clone();
    inner_->broadcast(h, root, timeout);
    t.copy_(h);
  }
  void do_batch_isend_irecv(std::vector<P2POp>& ops, Timeout timeout) override {
    std::vector<P2POp> host = ops;
    for (P2POp& p : host) p.tensor = p.tensor.to(cpu()).contiguous().clone();
    inner_->batch_isend_irecv(host, timeout);
    for (size_t i = 0; i < ops.size(); ++i)
      if (ops[i].kind == P2POp::kRecv) ops[i].tensor.copy_(host[i].tensor);
  }
  void do_barrier(Timeout timeout) override { inner_->barrier(timeout); }

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

class FakeDeviceBackend : public Backend {
 public:
  explicit FakeDeviceBackend(std::shared_ptr<Backend> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  std::string kind() const override { return "fake-device"; }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& global_ranks, const std::string& name,
                                          Timeout timeout = default_timeout()) override {
    return std::make_shared<FakeDeviceGroup>(inner_->new_group(global_ranks, name, timeout));
  }

 private:
  std::shared_ptr<Backend> inner_;
};

}  // namespace dtensor::testing
