// Sharded checkpoints. Each rank writes the blocks it owns (one copy of replicated data: the rank at
// coordinate 0 of each mesh dim where a tensor is replicated) to `rank<r>.bin` -- a header listing
// every block's name, global offset, shape, dtype, byte range and FNV-1a checksum, then the raw
// bytes -- and rank 0 writes `metadata.json` (tensor names, global shapes, dtypes, placements, the
// mesh, the step). Loading onto any mesh (another size, one rank) reassembles each tensor from the
// stored blocks and keeps the local block of the target layout. Truncated or corrupted files are
// refused with an error naming the file and the tensor.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::nn {

using NamedTensors = std::vector<std::pair<std::string, DTensor*>>;

// Collective over the tensors' mesh (a barrier at the end so the checkpoint is complete when any rank
// returns). Creates `dir`. Throws dtensor::Error on I/O failure.
void save_checkpoint(const std::string& dir, const NamedTensors& tensors, int64_t step);

// Fills every tensor (which must already exist with its target placements) from the checkpoint; the
// names, shapes and dtypes must match. Returns the saved step. Throws dtensor::Error naming the file
// for a missing, truncated or corrupted checkpoint, or the tensor for a mismatch.
int64_t load_checkpoint(const std::string& dir, const NamedTensors& tensors);

}  // namespace dtensor::nn
