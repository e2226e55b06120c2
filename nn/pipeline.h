// Runs one rank's pipeline program (nn/pipeline_schedule.h) for one training step: the forwards and
// backwards of its model chunks over the micro-batches, activations and their gradients sent to the
// neighbouring stages' ranks over the pipeline group (batch_isend_irecv), gradients accumulated in
// the parameters. The optimizer step is the caller's, after the flush (when this returns).
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "autograd/functional.h"
#include "nn/pipeline_schedule.h"

namespace dtensor::nn {

// The layout of an activation between chunks on this rank: one micro-batch's global shape (e.g.
// [B / m, T, D]) and placements on the stage's mesh (the tp ranks of one stage). Ranks of different
// stages with the same coordinate on that mesh exchange their local blocks, which have one shape.
struct ActivationLayout {
  MeshPtr mesh;
  Shape shape;
  Placements placements;
  DType dtype = DType::kFloat32;
  Device device = cpu();
};

// Forward of model chunk `chunk` for `micro_batch` on this rank. `input`: the previous chunk's
// activation (a leaf that requires grad, laid out as ActivationLayout) for chunk > 0, nullopt for
// chunk 0 (which reads its own input, e.g. token ids). Returns the activation for the next chunk, or
// for the last chunk the micro-batch's loss (a one-element DTensor, the mean over its tokens).
using ChunkForward = std::function<DTensor(int micro_batch, int chunk, const std::optional<DTensor>& input)>;

// Seconds of one step on this rank: in forwards and backwards, waiting in sends/recvs, in all.
// With $DTENSOR_PIPELINE_TRACE set (not "0"), run_pipeline also writes one line per action to stderr:
// "pipeline-trace rank R WHAT START END", WHAT an op (op_str: F3.1) or exchange/SENDS/RECVS, START
// and END in ms from the step's start on this rank (bench/pipeline_trace_sim.py reads them).
struct PipelineStepTimes {
  double compute_s = 0, p2p_s = 0, total_s = 0;
};

// Runs `program` (pipeline_program(...)[pp.rank()]): `pp` is the group of this rank's pipeline
// stages, group rank = stage. Backward runs from each micro-batch's loss / m, so the accumulated
// gradients are those of the mean of the m losses (the global batch's mean loss for equal
// micro-batches). Returns that mean on the rank holding the last chunk, 0 on the others.
// Throws dtensor::Error when a chunk's output is not laid out as `act` (and not redistributable to
// it) or is not one element for the last chunk; CommError when a peer fails (naming it).
double run_pipeline(const std::vector<PipelineAction>& program, ProcessGroup& pp, int stages, int virtual_stages,
                    int micro_batches, const ActivationLayout& act, const ChunkForward& forward,
                    PipelineStepTimes* times = nullptr);

}  // namespace dtensor::nn
