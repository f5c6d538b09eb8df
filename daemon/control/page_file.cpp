#include "daemon/control/page_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

#include "daemon/control/http_request_policy.hpp"

namespace tapstream {
namespace {

namespace fs = std::filesystem;

// Whether `file` lies below `root` (both canonical), by whole components.
bool lies_inside(const fs::path& root, const fs::path& file) {
  auto in_root = root.begin();
  auto in_file = file.begin();
  for (; in_root != root.end(); ++in_root, ++in_file) {
    if (in_root->empty()) continue;  // the empty last component of "/"
    if (in_file == file.end() || *in_root != *in_file) return false;
  }
  return in_file != file.end();
}

}  // namespace

PageFile& PageFile::operator=(PageFile&& other) noexcept {
  if (this != &other) {
    close();
    fd_ = std::exchange(other.fd_, -1);
    size_ = other.size_;
    content_type_ = std::move(other.content_type_);
  }
  return *this;
}

int PageFile::release() {
  return std::exchange(fd_, -1);
}

void PageFile::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

const char* page_content_type(const fs::path& file) {
  const std::string extension = file.extension().string();
  if (extension == ".html") return "text/html; charset=utf-8";
  if (extension == ".js") return "text/javascript; charset=utf-8";
  if (extension == ".css") return "text/css; charset=utf-8";
  if (extension == ".svg") return "image/svg+xml";
  if (extension == ".png") return "image/png";
  if (extension == ".ico") return "image/x-icon";
  return "";
}

PageFile open_page_file(const fs::path& web_root, const std::string& path, PageRefusal& refusal) {
  std::string& why = refusal.why;
  refusal.missing = false;
  const std::string relative = path == "/" ? "index.html" : path.substr(1);
  const char* type = page_content_type(relative);
  if (*type == '\0') {
    why = "not one of a page's file types (.html, .js, .css, .svg, .png, .ico)";
    return {};
  }
  std::error_code error;
  const fs::path root = fs::canonical(web_root, error);
  if (error) {
    why = "the web root " + printable(web_root.string()) + ": " + error.message();
    return {};
  }
  const fs::path real = fs::canonical(root / relative, error);
  if (error) {
    why = "no such file in the web root";
    refusal.missing = true;
    return {};
  }
  if (!lies_inside(root, real)) {
    why = "leads out of the web root (to " + printable(real.string()) + ")";
    return {};
  }
  // Non-blocking: a FIFO put in the root must not hold the server's thread.
  const int fd = ::open(real.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    why = std::string("cannot open: ") + std::strerror(errno);
    return {};
  }
  PageFile file(fd, 0, type);
  struct stat status {};
  if (::fstat(fd, &status) != 0 || !S_ISREG(status.st_mode)) {
    why = "not a regular file";
    return {};
  }
  const auto size = static_cast<std::uintmax_t>(status.st_size);
  if (size > max_page_file_bytes) {
    why = std::to_string(size) + " bytes, more than a page file may have (" +
          std::to_string(max_page_file_bytes) + ")";
    return {};
  }
  // Where the descriptor really leads: a folder of the path swapped for a
  // link between canonical() and open() shows here.
  char opened[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t length = ::readlink(link.c_str(), opened, sizeof opened - 1);
  if (length <= 0 || !lies_inside(root, fs::path(std::string(opened, length)))) {
    why = "the opened file is not the one inside the web root";
    return {};
  }
  return PageFile(file.release(), size, type);
}

}  // namespace tapstream
