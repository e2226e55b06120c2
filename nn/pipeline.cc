#include "nn/pipeline.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "dtensor/dtensor_spec.h"

namespace dtensor::nn {

namespace {

using Clock = std::chrono::steady_clock;
using Key = std::pair<int, int>;  // (micro-batch, chunk)

double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

bool tracing() {
  static const bool on = [] {
    const char* e = std::getenv("DTENSOR_PIPELINE_TRACE");
    return e != nullptr && *e != 0 && std::string(e) != "0";
  }();
  return on;
}

// One line per action for DTENSOR_PIPELINE_TRACE (see nn/pipeline.h).
void trace(int rank, const std::string& what, Clock::time_point step, Clock::time_point t0) {
  if (!tracing()) return;
  const auto ms = [&](Clock::time_point t) { return std::chrono::duration<double, std::milli>(t - step).count(); };
  std::fprintf(stderr, "pipeline-trace rank %d %s %.3f %.3f\n", rank, what.c_str(), ms(t0), ms(Clock::now()));
}

}  // namespace

double run_pipeline(const std::vector<PipelineAction>& program, ProcessGroup& pp, int stages, int virtual_stages,
                    int micro_batches, const ActivationLayout& act, const ChunkForward& forward,
                    PipelineStepTimes* times) {
  const auto t_step = Clock::now();
  const int chunks = stages * virtual_stages, me = pp.rank();
  DT_CHECK(pp.size() == stages, "pipeline: a group of ", pp.size(), " ranks for ", stages, " stages");
  const Shape local_shape = DTensorSpec(act.mesh, act.placements, act.shape, act.dtype).local_shape();
  std::map<Key, DTensor> inputs, outputs;        // kept from a forward to its backward
  std::map<Key, Tensor> activation_in, grad_in;  // received (or handed over): the input of (mb, chunk)
  std::map<int, Tensor> to_send;                 // by tag: a finished op's output, until its batch
  auto tag_of = [&](PipelineMessage::Kind kind, int mb, int chunk) { return (kind * micro_batches + mb) * chunks + chunk; };
  // A finished op's output goes to the rank of the chunk that consumes it: through the next batch,
  // or directly when that chunk is on this rank (one stage).
  auto hand_over = [&](PipelineMessage::Kind kind, int mb, int chunk, Tensor t) {
    const int consumer = kind == PipelineMessage::kActivation ? chunk + 1 : chunk - 1;
    if (consumer % stages == me)
      (kind == PipelineMessage::kActivation ? activation_in : grad_in)[{mb, consumer}] = std::move(t);
    else
      to_send[tag_of(kind, mb, chunk)] = std::move(t);
  };
  auto as_layout = [&](const Tensor& local) {
    return dtensor::from_local(local, act.mesh, act.placements, act.shape);
  };
  double loss_sum = 0, compute_s = 0, p2p_s = 0;
  for (const PipelineAction& a : program) {
    const auto t0 = Clock::now();
    if (a.kind == PipelineAction::kExchange) {
      std::vector<P2POp> ops;
      for (const PipelineMessage& s : a.sends) {
        auto it = to_send.find(s.tag);
        DT_CHECK(it != to_send.end(), "pipeline: rank ", me, " has nothing to send for tag ", s.tag);
        ops.push_back({P2POp::kSend, std::move(it->second), s.dst, s.tag});
        to_send.erase(it);
      }
      for (const PipelineMessage& r : a.recvs)
        ops.push_back({P2POp::kRecv, Tensor::empty(local_shape, act.dtype, act.device), r.src, r.tag});
      pp.batch_isend_irecv(ops);
      for (size_t i = a.sends.size(); i < ops.size(); ++i) {
        const PipelineMessage& r = a.recvs[i - a.sends.size()];
        if (r.kind == PipelineMessage::kActivation)
          activation_in[{r.micro_batch, r.chunk + 1}] = std::move(ops[i].tensor);
        else
          grad_in[{r.micro_batch, r.chunk - 1}] = std::move(ops[i].tensor);
      }
      p2p_s += since(t0);
      trace(me, absl::StrCat("exchange/", a.sends.size(), "/", a.recvs.size()), t_step, t0);
      continue;
    }
    const PipelineOp& op = a.op;
    const Key key{op.micro_batch, op.chunk};
    DT_CHECK(op.chunk % stages == me && op.chunk < chunks, "pipeline: rank ", me, " told to run ", op_str(op));
    if (op.kind == PipelineOp::kForward) {
      std::optional<DTensor> in;
      if (op.chunk > 0) {
        auto it = activation_in.find(key);
        DT_CHECK(it != activation_in.end(), "pipeline: rank ", me, " runs ", op_str(op), " before its input arrived");
        in = as_layout(it->second);
        set_requires_grad(*in);
        inputs[key] = *in;
        activation_in.erase(it);
      }
      DTensor out = forward(op.micro_batch, op.chunk, in);
      if (op.chunk + 1 == chunks) {
        DT_CHECK(numel(out.shape()) == 1, "pipeline: the last chunk returned ", shape_str(out.shape()),
                 "; accepted: the micro-batch's loss, one element");
        loss_sum += out.full_tensor().item();
        outputs[key] = F::div(out, static_cast<double>(micro_batches));
      } else {
        if (out.placements() != act.placements) out = out.redistribute(act.placements);
        DT_CHECK(out.shape() == act.shape, "pipeline: chunk ", op.chunk, " returned ", shape_str(out.shape()),
                 "; the activation between chunks is ", shape_str(act.shape));
        outputs[key] = out;
        hand_over(PipelineMessage::kActivation, op.micro_batch, op.chunk, out.local_tensor().contiguous());
      }
    } else {
      auto out = outputs.find(key);
      DT_CHECK(out != outputs.end(), "pipeline: rank ", me, " runs ", op_str(op), " before its forward");
      if (op.chunk + 1 == chunks) {
        backward(out->second);
      } else {
        auto g = grad_in.find(key);
        DT_CHECK(g != grad_in.end(), "pipeline: rank ", me, " runs ", op_str(op), " before its gradient arrived");
        backward(out->second, as_layout(g->second));
        grad_in.erase(g);
      }
      outputs.erase(out);
      if (op.chunk > 0) {
        NoGradGuard no_grad;
        std::optional<DTensor> gi = grad(inputs.at(key));
        Tensor local = Tensor::zeros(local_shape, act.dtype, act.device);
        if (gi) local = (gi->placements() == act.placements ? *gi : gi->redistribute(act.placements)).local_tensor().contiguous();
        inputs.erase(key);
        hand_over(PipelineMessage::kGradient, op.micro_batch, op.chunk, std::move(local));
      }
    }
    compute_s += since(t0);
    trace(me, op_str(op), t_step, t0);
  }
  DT_CHECK(to_send.empty() && outputs.empty() && inputs.empty(), "pipeline: rank ", me,
           "'s program ended with outputs not sent or backwards not run");
  if (times) *times = {compute_s, p2p_s, since(t_step)};
  return me == (chunks - 1) % stages ? loss_sum / micro_batches : 0.0;
}

}  // namespace dtensor::nn
