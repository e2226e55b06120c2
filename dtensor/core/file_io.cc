#include "dtensor/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dtensor/core/error.h"

namespace dtensor {
namespace {

// Closes the descriptor on every way out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::string read_file(const std::string& path, int64_t max_bytes) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  DT_CHECK(f.fd >= 0, "cannot read '", path, "': ", std::strerror(errno));
  struct stat st;
  DT_CHECK(::fstat(f.fd, &st) == 0, "cannot read '", path, "': ", std::strerror(errno));
  DT_CHECK(S_ISREG(st.st_mode), "cannot read '", path, "': not a regular file");
  DT_CHECK(st.st_size <= max_bytes, "'", path, "' has ", st.st_size, " bytes; at most ", max_bytes,
           " are accepted");
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::read(f.fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    DT_CHECK(n >= 0, "cannot read '", path, "': ", std::strerror(errno));
    if (n == 0) break;  // the file shrank while we read it
    done += static_cast<size_t>(n);
  }
  text.resize(done);
  return text;
}

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  std::string why;
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    DT_CHECK(f.fd >= 0, "cannot write '", path, "': ", std::strerror(errno));
    size_t done = 0;
    while (done < text.size() && why.empty()) {
      ssize_t n = ::write(f.fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) why = std::strerror(errno);
      else done += static_cast<size_t>(n);
    }
    if (why.empty() && ::fsync(f.fd) != 0) why = std::strerror(errno);
  }
  if (why.empty() && ::rename(tmp.c_str(), path.c_str()) != 0) why = std::strerror(errno);
  if (!why.empty()) {
    ::unlink(tmp.c_str());
    DT_FAIL("cannot write '", path, "': ", why);
  }
}

}  // namespace dtensor
