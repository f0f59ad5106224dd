#include "util/atomic_file.hpp"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval::util {

namespace fs = std::filesystem;

namespace {
constexpr size_t kBufferBytes = size_t{1} << 20;

// Temporary files removed on SIGINT, SIGTERM and SIGHUP (see the header).
// A fixed table the signal handler can read without locks or allocation:
// each slot is free (0), being filled (1), holding a live temporary path (2)
// or claimed by the handler (3). The owner fills a free slot and publishes it
// (1 -> 2, release); it retires it with 2 -> 0, which fails only when the
// handler has claimed it (2 -> 3) and the process is about to end anyway.
// More live temporary files than slots, or a longer path, are not registered
// (their destructor still removes them on every other exit path).
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr size_t kSlots = 16;
struct Slot {
  std::atomic<int> state{0};
  char path[PATH_MAX];
};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");
Slot g_slots[kSlots];
struct sigaction g_previous[std::size(kSignals)];

extern "C" void remove_temp_files_and_reraise(int sig) {
  const int saved_errno = errno;
  for (Slot& s : g_slots) {
    int expected = 2;
    if (s.state.compare_exchange_strong(expected, 3, std::memory_order_acquire)) ::unlink(s.path);  // async-signal-safe
  }
  // the previous disposition (the default: the process ends by this signal, its status says so)
  for (size_t i = 0; i < std::size(kSignals); ++i)
    if (kSignals[i] == sig) ::sigaction(sig, &g_previous[i], nullptr);
  ::raise(sig);  // delivered when this handler returns (the signal is blocked while it runs)
  errno = saved_errno;
}

/// Installs the handler for each signal that is not ignored (a command started
/// in the background by a shell ignores SIGINT: it stays ignored) and whose
/// handler is not already this one; the disposition it replaces is kept for
/// the re-raise. Called for every temporary file, so a handler installed by
/// other code since the last one is chained, not lost. Call with kSignals blocked.
void install_signal_cleanup() {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction old {};
    if (::sigaction(kSignals[i], nullptr, &old) != 0) continue;
    if (old.sa_handler == SIG_IGN || old.sa_handler == remove_temp_files_and_reraise) continue;
    g_previous[i] = old;
    struct sigaction sa {};
    sa.sa_handler = remove_temp_files_and_reraise;
    sigemptyset(&sa.sa_mask);
    for (int s : kSignals) sigaddset(&sa.sa_mask, s);  // one handler at a time
    sa.sa_flags = SA_RESTART;
    ::sigaction(kSignals[i], &sa, nullptr);
  }
}

/// Publishes `path` for the handler; the slot index, or -1 when none is free.
int register_temp(const std::string& path) {
  if (path.size() >= PATH_MAX) return -1;
  for (size_t i = 0; i < kSlots; ++i) {
    int expected = 0;
    if (!g_slots[i].state.compare_exchange_strong(expected, 1, std::memory_order_acquire)) continue;
    std::memcpy(g_slots[i].path, path.c_str(), path.size() + 1);
    g_slots[i].state.store(2, std::memory_order_release);
    return static_cast<int>(i);
  }
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  int expected = 2;
  g_slots[slot].state.compare_exchange_strong(expected, 0, std::memory_order_acq_rel);
}

/// Blocks kSignals in this thread for its lifetime: creating a temporary file
/// and registering it happen together, or not at all, before a signal is handled.
class SignalsBlocked {
 public:
  SignalsBlocked() {
    sigset_t set;
    sigemptyset(&set);
    for (int s : kSignals) sigaddset(&set, s);
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &old_, nullptr); }

 private:
  sigset_t old_;
};
}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  if (path_.empty()) throw IoError("output path is empty");
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw IoError(fmt::format("{}: is a directory", path_));
    if (!S_ISREG(st.st_mode)) {
      // a device or FIFO: write into it directly (rename cannot replace it)
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd_ < 0) {
        const int e = errno;
        fail("cannot open for writing", e);
      }
      buf_.reserve(kBufferBytes);
      return;
    }
  }
  target_ = resolve_links(path_);  // follow a symlink, also one whose file does not exist yet: keep the link
  fs::path t(target_);
  fs::path dir = t.parent_path();
  std::string name = t.filename().string();
  std::string tmpl = ((dir.empty() ? fs::path(".") : dir) / ("." + name + ".tmp.XXXXXX")).string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  {
    SignalsBlocked blocked;
    install_signal_cleanup();
    fd_ = ::mkostemp(buf.data(), O_CLOEXEC);
    if (fd_ >= 0) {
      tmp_ = buf.data();
      slot_ = register_temp(tmp_);
    }
  }
  if (fd_ < 0) {
    const int e = errno;
    fail(fmt::format("cannot create a temporary file in {}", dir.empty() ? std::string(".") : dir.string()), e);
  }
  // mkstemp creates mode 0600; give the file the mode a plain open() would
  // (0666 less the umask), or the mode of the file it replaces.
  mode_t mode;
  if (::stat(target_.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  if (::fchmod(fd_, mode) != 0) {
    const int e = errno;
    fail("cannot set the mode of the temporary file", e);
  }
  buf_.reserve(kBufferBytes);
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
  tmp_.clear();
  unregister_temp(slot_);
  slot_ = -1;
}

void AtomicFile::fail(const std::string& what, int err) {
  discard();
  throw IoError(fmt::format("{}: {}: {}", path_, what, std::strerror(err)));
}

void AtomicFile::flush_buffer() {
  const char* p = buf_.data();
  size_t left = buf_.size();
  while (left > 0) {
    ssize_t n = ::write(fd_, p, left);
    if (n < 0) {
      const int e = errno;
      if (e == EINTR) continue;
      fail(fmt::format("write failed after {} bytes", written_), e);
    }
    if (n == 0) fail(fmt::format("write failed after {} bytes", written_), EIO);
    p += n;
    left -= static_cast<size_t>(n);
    written_ += static_cast<uint64_t>(n);
  }
  buf_.clear();
}

void AtomicFile::write(std::string_view bytes) {
  if (fd_ < 0 || committed_) throw IoError(fmt::format("{}: write after the file was closed", path_));
  if (buf_.size() + bytes.size() > kBufferBytes) {
    flush_buffer();
    if (bytes.size() >= kBufferBytes) {
      buf_.assign(bytes);
      flush_buffer();
      return;
    }
  }
  buf_.append(bytes);
}

void AtomicFile::commit() {
  if (fd_ < 0 || committed_) throw IoError(fmt::format("{}: commit after the file was closed", path_));
  flush_buffer();
  if (!tmp_.empty() && ::fsync(fd_) != 0) {
    const int e = errno;
    fail("cannot flush to disk (fsync)", e);
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int e = errno;
    fail("write failed on close", e);
  }
  if (!tmp_.empty()) {
    if (::rename(tmp_.c_str(), target_.c_str()) != 0) {
      const int e = errno;
      fail(fmt::format("cannot rename {} over it", tmp_), e);
    }
    tmp_.clear();
    unregister_temp(slot_);  // a signal before this finds the name gone: unlink fails harmlessly
    slot_ = -1;
  }
  committed_ = true;
}

void write_file_atomic(const std::string& path, std::string_view content) {
  AtomicFile f(path);
  f.write(content);
  f.commit();
}

void write_all(int fd, std::string_view content, const std::string& name) {
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int e = n < 0 ? errno : EIO;
      throw IoError(fmt::format("{}: write failed after {} bytes: {}", name, done, std::strerror(e)));
    }
    done += static_cast<size_t>(n);
  }
}

bool same_output_file(const std::string& out, const std::string& path) {
  const auto name = [](const std::string& p) { return p == "-" ? std::string("/dev/stdout") : p; };
  if (resolve_links(name(out)) == resolve_links(name(path))) return true;
  std::error_code ec;
  return fs::equivalent(name(out), name(path), ec) && !ec;
}

bool names_stdout(const std::string& path) {
  if (path == "-" || path == "/dev/stdout" || path == "/proc/self/fd/1" || path == "/dev/fd/1") return true;
  struct stat out {}, named {};
  return ::fstat(STDOUT_FILENO, &out) == 0 && ::stat(path.c_str(), &named) == 0 && out.st_dev == named.st_dev &&
         out.st_ino == named.st_ino;
}

std::string resolve_links(const std::string& path) {
  std::error_code ec;
  fs::path p = path;
  for (int hops = 0; hops < 40 && fs::is_symlink(p, ec); ++hops) {  // 40: Linux's limit (ELOOP)
    fs::path to = fs::read_symlink(p, ec);
    if (ec) break;
    p = to.is_absolute() ? to : p.parent_path() / to;
  }
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p.string() : c.string();
}

// check_writable: a regular file (or a new one) needs a writable directory
// for AtomicFile's temporary file; an existing device or FIFO (/dev/stdout) is
// written in place and needs write permission itself.
void check_writable(const std::string& option, const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw ArgumentError(fmt::format("{} {}: is a directory", option, path));
  const bool exists = fs::exists(path, ec);
  if (exists && !fs::is_regular_file(path, ec)) {
    if (::access(path.c_str(), W_OK) != 0) throw ArgumentError(fmt::format("{} {}: not writable", option, path));
    return;
  }
  const fs::path target = resolve_links(path);
  fs::path parent = target.parent_path();
  if (parent.empty()) parent = ".";
  if (!fs::is_directory(parent, ec))
    throw ArgumentError(fmt::format("{} {}: directory {} does not exist", option, path, parent.string()));
  if (::access(parent.c_str(), W_OK | X_OK) != 0)
    throw ArgumentError(fmt::format("{} {}: directory {} is not writable (the file is replaced through a temporary file there)",
                                    option, path, parent.string()));
  if (exists && ::access(path.c_str(), W_OK) != 0) throw ArgumentError(fmt::format("{} {}: not writable", option, path));
}

}  // namespace kveval::util
