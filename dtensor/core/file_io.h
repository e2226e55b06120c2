// Whole-file reads and writes for files a user names on the command line (reports, graphs, plans).
// A write never leaves a half-written file under the final name: it goes to a temporary name in the
// same directory, is flushed to disk, and is committed by rename(2), which POSIX makes atomic.
#pragma once

#include <cstdint>
#include <string>

namespace dtensor {

// Reads all of `path`. Throws dtensor::Error naming the file when it cannot be opened or read, is
// not a regular file, or is larger than `max_bytes` (the limit is named in the message).
std::string read_file(const std::string& path, int64_t max_bytes);

// Writes `text` to `path` atomically (temporary file "<path>.tmp.<pid>", fsync, rename). A symlink is
// followed (its target is replaced atomically, the link stays); a FIFO or a device node is written in
// place (never replaced by a regular file); a directory is refused. Throws dtensor::Error naming the
// file and the system's reason; on failure the temporary file is removed and an existing regular
// `path` is left as it was.
void write_file_atomic(const std::string& path, const std::string& text);

}  // namespace dtensor
