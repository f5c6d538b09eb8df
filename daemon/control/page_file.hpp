#pragma once
// Opening one of the page's static files for the web server: the path that
// HttpRequestPolicy decoded, looked up under the web root, opened only when
// it really lies inside the root (symlinks resolved, checked again on the
// opened descriptor, so a link swapped in between changes nothing), is a
// regular file (never a FIFO, device or directory: opened non-blocking) of
// a page's type, and is not larger than max_page_file_bytes.

#include <cstdint>
#include <filesystem>
#include <string>

namespace tapstream {

// The largest file served: the page's files are a few tens of kilobytes.
inline constexpr std::uintmax_t max_page_file_bytes = 16 << 20;

// An open page file; owns its descriptor.
class PageFile {
 public:
  PageFile() = default;
  PageFile(int fd, std::uintmax_t size, std::string content_type)
      : fd_(fd), size_(size), content_type_(std::move(content_type)) {}
  ~PageFile() { close(); }
  PageFile(PageFile&& other) noexcept { *this = std::move(other); }
  PageFile& operator=(PageFile&& other) noexcept;
  PageFile(const PageFile&) = delete;
  PageFile& operator=(const PageFile&) = delete;

  bool is_open() const { return fd_ >= 0; }
  std::uintmax_t size() const { return size_; }
  const std::string& content_type() const { return content_type_; }
  // Hands the descriptor over (the caller closes it).
  int release();

 private:
  void close();

  int fd_ = -1;
  std::uintmax_t size_ = 0;
  std::string content_type_;
};

// Why a page file was not served.
struct PageRefusal {
  bool missing = false;  // no such file (a browser's /favicon.ico): not worth a warning
  std::string why;       // for the log; names printable
};

// The page file `path` names ("/index.html": HttpRequestPolicy's decoded
// path, "/" standing for /index.html) under `web_root`; when it is not
// served, a closed PageFile, and `refusal` says why.
PageFile open_page_file(const std::filesystem::path& web_root, const std::string& path,
                        PageRefusal& refusal);

// The Content-Type a page file of this name is served with; "" for a name
// that is not one of a page's types (such a file is not served).
const char* page_content_type(const std::filesystem::path& file);

}  // namespace tapstream
