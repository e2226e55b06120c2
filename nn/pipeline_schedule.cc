#include "nn/pipeline_schedule.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "dtensor/core/error.h"

namespace dtensor::nn {

std::string op_str(const PipelineOp& op) {
  return absl::StrCat(op.kind == PipelineOp::kForward ? "F" : "B", op.micro_batch, ".", op.chunk);
}

namespace {

void check_sizes(int p, int v, int m) {
  DT_CHECK(p >= 1 && v >= 1 && m >= 1, "pipeline schedule: ", p, " stages, ", v, " virtual stages, ", m,
           " micro-batches; accepted: each >= 1");
  DT_CHECK(v == 1 || m % p == 0, "pipeline schedule: interleaved 1F1B (", v, " virtual stages) with ", m,
           " micro-batches over ", p, " stages; accepted: micro-batches a multiple of the stages");
}

// Megatron-LM's interleaved order: the k-th forward (backward) of rank r.
PipelineOp interleaved_op(PipelineOp::Kind kind, int k, int r, int p, int v) {
  const int group = k / (p * v), in_group = k % (p * v);
  int vs = in_group / p;
  if (kind == PipelineOp::kBackward) vs = v - 1 - vs;
  return PipelineOp{kind, group * p + k % p, vs * p + r};
}

}  // namespace

std::vector<RankSchedule> pipeline_schedule(int p, int v, int m) {
  check_sizes(p, v, m);
  std::vector<RankSchedule> out(p);
  for (int r = 0; r < p; ++r) {
    const int total = m * v;
    const int warmup = v == 1 ? std::min(p - r - 1, m) : std::min(2 * (p - r - 1) + (v - 1) * p, total);
    auto fwd = [&](int k) {
      return v == 1 ? PipelineOp{PipelineOp::kForward, k, r} : interleaved_op(PipelineOp::kForward, k, r, p, v);
    };
    auto bwd = [&](int k) {
      return v == 1 ? PipelineOp{PipelineOp::kBackward, k, r} : interleaved_op(PipelineOp::kBackward, k, r, p, v);
    };
    RankSchedule& s = out[r];
    for (int k = 0; k < warmup; ++k) s.push_back(fwd(k));
    for (int k = 0; k < total - warmup; ++k) {  // steady state: one forward, one backward
      s.push_back(fwd(warmup + k));
      s.push_back(bwd(k));
    }
    for (int k = total - warmup; k < total; ++k) s.push_back(bwd(k));  // cool-down
  }
  return out;
}

PipelineTimeline simulate_pipeline(const std::vector<RankSchedule>& schedule, int p, int v, int m, double f,
                                   double b) {
  check_sizes(p, v, m);
  DT_CHECK(static_cast<int>(schedule.size()) == p, "pipeline schedule: ", schedule.size(), " ranks for ", p,
           " stages");
  const int chunks = p * v;
  // Every rank runs each (F|B, micro-batch, chunk) of its chunks exactly once.
  for (int r = 0; r < p; ++r) {
    std::set<std::tuple<int, int, int>> seen;
    for (const PipelineOp& op : schedule[r]) {
      DT_CHECK(op.micro_batch >= 0 && op.micro_batch < m && op.chunk >= 0 && op.chunk < chunks &&
                   op.chunk % p == r,
               "pipeline schedule: rank ", r, " runs ", op_str(op), "; accepted: micro-batches 0 to ", m - 1,
               " on chunks c < ", chunks, " with c % ", p, " == ", r);
      DT_CHECK(seen.insert({op.kind, op.micro_batch, op.chunk}).second, "pipeline schedule: rank ", r, " runs ",
               op_str(op), " twice");
    }
    DT_CHECK(static_cast<int>(seen.size()) == 2 * m * v, "pipeline schedule: rank ", r, " runs ", seen.size(),
             " ops; expected ", 2 * m * v, " (a forward and a backward of each micro-batch on each of its ",
             v, " chunks)");
  }
  // Finish time of each op, by (kind, micro-batch, chunk); -1 until it has run.
  std::vector<double> done(2 * static_cast<size_t>(m) * chunks, -1);
  auto at = [&](int kind, int mb, int c) -> double& { return done[(static_cast<size_t>(kind) * m + mb) * chunks + c]; };
  PipelineTimeline t;
  t.start.assign(p, {});
  t.finish.assign(p, {});
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < schedule[r].size()) {
        const PipelineOp& op = schedule[r][next[r]];
        double ready = free_at[r];
        bool ok = true;
        auto need = [&](int kind, int mb, int c) {
          const double x = at(kind, mb, c);
          if (x < 0) ok = false;
          ready = std::max(ready, x);
        };
        if (op.kind == PipelineOp::kForward) {
          if (op.chunk > 0) need(PipelineOp::kForward, op.micro_batch, op.chunk - 1);
        } else {
          need(PipelineOp::kForward, op.micro_batch, op.chunk);
          if (op.chunk + 1 < chunks) need(PipelineOp::kBackward, op.micro_batch, op.chunk + 1);
        }
        if (!ok) break;
        const double end = ready + (op.kind == PipelineOp::kForward ? f : b);
        t.start[r].push_back(ready);
        t.finish[r].push_back(end);
        at(op.kind, op.micro_batch, op.chunk) = end;
        free_at[r] = end;
        ++next[r];
        progress = true;
      }
    }
  }
  std::vector<std::string> stuck;
  for (int r = 0; r < p; ++r)
    if (next[r] < schedule[r].size()) stuck.push_back(absl::StrCat("rank ", r, " at ", op_str(schedule[r][next[r]])));
  DT_CHECK(stuck.empty(), "pipeline schedule: the order waits forever (", absl::StrJoin(stuck, ", "),
           " wait for inputs that are never produced before them)");
  double busy = 0;
  for (int r = 0; r < p; ++r) {
    t.makespan = std::max(t.makespan, free_at[r]);
    busy += m * v * (f + b);
    int live = 0, peak = 0;
    for (const PipelineOp& op : schedule[r]) peak = std::max(peak, live += op.kind == PipelineOp::kForward ? 1 : -1);
    t.peak_activations.push_back(peak);
  }
  t.bubble_fraction = t.makespan > 0 ? 1 - busy / (p * t.makespan) : 0;
  return t;
}

std::vector<std::vector<PipelineAction>> pipeline_program(const std::vector<RankSchedule>& schedule, int p, int v,
                                                          int m, double f, double b) {
  const PipelineTimeline t = simulate_pipeline(schedule, p, v, m, f, b);
  const int chunks = p * v;
  // Per rank: time -> the batch of transfers at that time.
  std::vector<std::map<double, PipelineAction>> batches(p);
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < schedule[r].size(); ++i) {
      const PipelineOp& op = schedule[r][i];
      PipelineMessage msg;
      msg.micro_batch = op.micro_batch;
      msg.chunk = op.chunk;
      msg.src = r;
      if (op.kind == PipelineOp::kForward && op.chunk + 1 < chunks) {
        msg.kind = PipelineMessage::kActivation;
        msg.dst = (op.chunk + 1) % p;
      } else if (op.kind == PipelineOp::kBackward && op.chunk > 0) {
        msg.kind = PipelineMessage::kGradient;
        msg.dst = (op.chunk - 1) % p;
      } else {
        continue;  // the last chunk's forward (the loss) and the first chunk's backward send nothing
      }
      if (msg.dst == r) continue;  // p = 1: handed over on the rank
      msg.tag = (msg.kind * m + msg.micro_batch) * chunks + msg.chunk;
      const double when = t.finish[r][i];
      for (int side : {r, msg.dst}) {
        PipelineAction& a = batches[side][when];
        a.kind = PipelineAction::kExchange;
        (side == r ? a.sends : a.recvs).push_back(msg);
      }
    }
  }
  std::vector<std::vector<PipelineAction>> out(p);
  for (int r = 0; r < p; ++r) {
    auto it = batches[r].begin();
    for (size_t i = 0; i < schedule[r].size(); ++i) {
      for (; it != batches[r].end() && it->first <= t.start[r][i]; ++it) out[r].push_back(it->second);
      PipelineAction a;
      a.kind = PipelineAction::kCompute;
      a.op = schedule[r][i];
      out[r].push_back(a);
    }
    for (; it != batches[r].end(); ++it) out[r].push_back(it->second);
  }
  return out;
}

}  // namespace dtensor::nn
