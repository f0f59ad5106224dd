#include "util/input_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include <fmt/format.h>

#include "util/error.hpp"
#include "util/memory.hpp"

namespace kveval::util {

namespace {

constexpr size_t kChunk = size_t{1} << 20;
constexpr size_t kMinChunk = 4096;
constexpr const char* kEnv = "KVEVAL_MAX_INPUT_BYTES";

const char* file_type(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

}  // namespace

uint64_t input_limit(InputKind kind) {
  const char* v = std::getenv(kEnv);
  if (v == nullptr || *v == '\0') return kind == InputKind::Text ? kInputLimitText : kInputLimitData;
  const std::string_view s(v);
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || p != s.data() + s.size() || n == 0)
    throw ArgumentError(fmt::format("{}={}: expected a positive decimal byte count", kEnv, s));
  return n;
}

InputFile::InputFile(std::string path, InputKind kind) : path_(std::move(path)), limit_(input_limit(kind)) {
  // O_NONBLOCK: opening a FIFO without a writer would wait; the fstat below refuses it anyway
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd_ < 0) {
    const int e = errno;
    if (e == ENOENT) throw SpecError(fmt::format("{}: not found", path_));
    throw SpecError(fmt::format("{}: cannot open: {}", path_, std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int e = errno;
    ::close(fd_);
    throw SpecError(fmt::format("{}: cannot stat: {}", path_, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    throw SpecError(fmt::format("{}: is {}, not a regular file", path_, file_type(st.st_mode)));
  }
  size_hint_ = static_cast<uint64_t>(st.st_size);
  if (size_hint_ > limit_) {
    ::close(fd_);
    fd_ = -1;
    over_limit();
  }
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void InputFile::over_limit() const {
  throw SpecError(fmt::format("{}: larger than the input file limit of {} ({} bytes; set {} to change it)", path_,
                              format_bytes(limit_), limit_, kEnv));
}

bool InputFile::fill() {
  if (eof_) return false;
  if (pos_ > 0) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  const size_t old = buf_.size();
  // one byte past the limit is enough to know the file is over it; a small file
  // is read in a buffer of its own size (plus one byte), not a whole chunk
  const uint64_t room = limit_ + 1 - read_;
  const uint64_t left = size_hint_ > read_ ? size_hint_ - read_ + 1 : 0;
  const uint64_t chunk = std::clamp<uint64_t>(left, kMinChunk, kChunk);
  const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk, room));
  buf_.resize(old + want);
  ssize_t n;
  do n = ::read(fd_, buf_.data() + old, want);
  while (n < 0 && errno == EINTR);
  if (n < 0) {
    const int e = errno;
    buf_.resize(old);
    throw SpecError(fmt::format("{}: read error after {} bytes: {}", path_, read_, std::strerror(e)));
  }
  buf_.resize(old + static_cast<size_t>(n));
  read_ += static_cast<uint64_t>(n);
  if (read_ > limit_) over_limit();
  if (n == 0) eof_ = true;
  return n > 0;
}

bool InputFile::getline(std::string& line) {
  size_t scanned = pos_;
  for (;;) {
    const size_t nl = buf_.find('\n', scanned);
    if (nl != std::string::npos) {
      line.assign(buf_, pos_, nl - pos_);
      pos_ = nl + 1;
      return true;
    }
    scanned = buf_.size() - pos_;  // fill() moves the unread bytes to the front
    if (!fill()) break;
  }
  if (pos_ == buf_.size()) return false;
  line.assign(buf_, pos_, std::string::npos);  // a last line without '\n'
  pos_ = buf_.size();
  return true;
}

std::string InputFile::read_all() {
  while (fill()) {
  }
  std::string out = buf_.substr(pos_);
  buf_.clear();
  pos_ = 0;
  return out;
}

std::string read_input_file(const std::string& path, InputKind kind) {
  InputFile f(path, kind);
  return f.read_all();
}

}  // namespace kveval::util
