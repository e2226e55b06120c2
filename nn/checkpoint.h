// Sharded, crash-safe checkpoints.
//
// On-disk layout of the checkpoint directory DIR (the path the caller names):
//   DIR/LATEST                           one line: the committed version's name, e.g. "ckpt-8-05f3a1c2e4b6d7f8"
//   DIR/ckpt-<step>-<nonce>/metadata.json  tensor names, global shapes, dtypes, placements, the mesh, the
//                                        ranks that wrote files, the step
//   DIR/ckpt-<step>-<nonce>/rank<r>.bin  one per rank: the magic "DTCKPT1\n", the header length (uint64,
//                                        little-endian), a JSON header {"blocks": [{name, shape, offset,
//                                        dtype, begin, nbytes, checksum}]} and the data section: each block's
//                                        bytes, row-major, at `begin` (bytes from the data section's start),
//                                        with their FNV-1a 64 checksum.
// Each rank writes the blocks it owns: its shard, and one copy of replicated data (the rank at coordinate 0
// of each mesh dim where a tensor is replicated).
//
// Commit protocol. Files are never modified in place. Rank 0 draws a random nonce, creates the fresh version
// directory DIR/ckpt-<step>-<nonce>/ and shares its name; every rank writes its rank file there (O_EXCL,
// fsync, fsync of the directory); all ranks agree that every write succeeded; rank 0 writes metadata.json
// (fsync), then LATEST.tmp-<nonce> (fsync), renames it over LATEST and fsyncs DIR. That rename is the commit
// point: before it LATEST names the old version, after it the new one, both complete, so a save killed at any
// instant leaves DIR loading as the whole old or the whole new checkpoint. After the commit rank 0 removes
// every other version directory and LATEST.tmp-* file (leftovers of failed or killed saves, which load
// ignores) and the flat files of the layout before LATEST. The save is collective and agreed: it returns on
// every rank or throws the same dtensor::Error on every rank; a save that fails before the commit removes
// its version directory. One save into a directory at a time.
//
// Loading reads LATEST; a DIR without LATEST but with metadata.json is read as the flat layout of earlier
// dtensor versions (metadata.json and rank<r>.bin directly in DIR). Loading onto any mesh (another size, one
// rank) reassembles each tensor from the stored blocks and keeps the local block of the target layout. Every
// size is checked against the header, the file and the metadata before a byte is copied.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/dtensor.h"

namespace dtensor::nn {

using NamedTensors = std::vector<std::pair<std::string, DTensor*>>;

// Collective over the tensors' mesh: writes a new version of the checkpoint in `dir` (created with its
// parents) by the protocol above; names must be distinct. Throws dtensor::Error on every rank if any rank's
// write fails, naming the file and the reason (with the failing rank); `dir` then still loads as before.
void save_checkpoint(const std::string& dir, const NamedTensors& tensors, int64_t step);

// Fills every tensor (which must already exist with its target placements) from the checkpoint; the names,
// shapes and dtypes must match, and every saved tensor must be among `tensors` (strict, as torch's
// load_state_dict: a checkpoint of a deeper model is an error, not half loaded). Returns the saved step. Throws dtensor::Error naming the file for a missing,
// truncated or corrupted checkpoint (a bad magic, header length, JSON field, dtype, shape, offset, byte range
// or checksum; blocks that overlap or leave a tensor incomplete), or naming the tensor for a mismatch.
int64_t load_checkpoint(const std::string& dir, const NamedTensors& tensors);

// Creates `dir` (and its parents) and checks that a file can be created there (a probe file, removed
// again). Returns "" when it can, else the reason, e.g. "Permission denied". For checking a save
// target before a long run (`dtensor train --save`). Not collective; safe to call from several ranks.
std::string checkpoint_dir_write_error(const std::string& dir);

// Test hook: when set, save_checkpoint calls it on each rank at each step of the commit protocol, with the
// step's name and the global rank: "version-dir" (rank 0 created it), "rank-file" (this rank's file is
// durable), "metadata", "latest-tmp" (before the commit rename), "commit" (after it), "cleanup". It may throw
// (to inject a failure) or sleep (to widen the window for a kill). Set it only while no save runs.
using SaveHook = std::function<void(const std::string& step, int rank)>;
void set_save_hook_for_testing(SaveHook hook);

}  // namespace dtensor::nn
