#include "dtensor/core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
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

namespace {

// Writes all of `text` to `fd`; "" or the system's reason.
std::string write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::strerror(errno);
    done += static_cast<size_t>(n);
  }
  return "";
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  // A symlink is followed (the file it names is replaced, not the link); a FIFO or a device is written
  // in place, as a shell's '>' would: a rename would replace it with a regular file.
  std::string target = path;
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    char* resolved = ::realpath(path.c_str(), nullptr);
    if (resolved) {
      target = resolved;
      ::free(resolved);
    } else {
      DT_CHECK(errno == ENOENT, "cannot write '", path, "': ", std::strerror(errno));
      // A dangling link: write the file it names.
      std::string link(4096, '\0');
      const ssize_t n = ::readlink(path.c_str(), link.data(), link.size());
      DT_CHECK(n > 0 && static_cast<size_t>(n) < link.size(), "cannot write '", path, "': cannot read the link");
      link.resize(static_cast<size_t>(n));
      const size_t slash = path.rfind('/');
      target = link[0] == '/' || slash == std::string::npos ? link : path.substr(0, slash + 1) + link;
    }
  }
  if (::stat(target.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    DT_CHECK(!S_ISDIR(st.st_mode), "cannot write '", path, "': it is a directory");
    Fd f{::open(target.c_str(), O_WRONLY | O_CLOEXEC)};
    DT_CHECK(f.fd >= 0, "cannot write '", path, "': ", std::strerror(errno));
    const std::string why = write_all(f.fd, text);
    DT_CHECK(why.empty(), "cannot write '", path, "': ", why);
    return;
  }
  const std::string tmp = target + ".tmp." + std::to_string(::getpid());
  std::string why;
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    DT_CHECK(f.fd >= 0, "cannot write '", path, "': ", std::strerror(errno));
    why = write_all(f.fd, text);
    if (why.empty() && ::fsync(f.fd) != 0) why = std::strerror(errno);
  }
  if (why.empty() && ::rename(tmp.c_str(), target.c_str()) != 0) why = std::strerror(errno);
  if (!why.empty()) {
    ::unlink(tmp.c_str());
    DT_FAIL("cannot write '", path, "': ", why);
  }
}

}  // namespace dtensor
