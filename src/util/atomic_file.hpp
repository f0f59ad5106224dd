#pragma once
// Writing an output file all or nothing. Every output of kveval (results,
// --log-samples, bench --json-out, make-model) goes through here, so a full
// disk, an I/O error or a crash never leaves a half-written file under the
// target's name and is never silent.
//
// A regular target (or a new one) is written to a temporary file
// `.<name>.tmp.XXXXXX` in the target's directory (the same file system, so
// the final rename(2) is atomic); every write(2) is checked, the data are
// fsync'ed, the file is closed (checked), then renamed over the target. A
// symbolic link is followed (also one whose file does not exist yet): the file
// it points to is replaced or created, the link kept.
// On any failure the temporary file is removed and an IoError names the path
// and strerror(errno); an existing target is left as it was.
// A target that exists and is not a regular file (/dev/stdout, /dev/full, a
// FIFO) cannot be replaced by rename: it is opened and written directly, still
// checking every write and the close.
// SIGINT, SIGTERM and SIGHUP while temporary files exist: a handler (installed
// when a temporary file is created, for each of these signals the process
// does not ignore; a handler found in its place is called after it) unlinks every live temporary file (async-signal-safe unlink(2) of
// paths published in a fixed table when the file was created), restores the
// signal's previous disposition and raises it again, so the process ends as it
// would have (killed by that signal) and leaves no `.<name>.tmp.XXXXXX` behind.
// Targets are never touched by the handler: each is either the old file or the
// complete new one. SIGKILL cannot be caught: a temporary file may then remain.
#include <cstdint>
#include <string>
#include <string_view>

namespace kveval::util {

/// One output file being written; see the file comment. Not copyable.
class AtomicFile {
 public:
  /// Opens the temporary file (or a non-regular target). Throws IoError
  /// "path: cannot create a temporary file in DIR: reason" and the like.
  explicit AtomicFile(std::string path);
  /// Removes the temporary file unless commit() succeeded.
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  /// Appends bytes (buffered, 1 MiB). Throws IoError "path: write failed after
  /// N bytes: reason".
  void write(std::string_view bytes);
  /// Flushes, fsyncs, closes and renames over the target. Throws IoError; after
  /// a failure nothing is left behind but the untouched old target.
  void commit();
  /// Bytes written so far.
  uint64_t bytes() const { return written_ + buf_.size(); }
  /// The target path as given.
  const std::string& path() const { return path_; }

 private:
  void flush_buffer();
  void discard() noexcept;
  [[noreturn]] void fail(const std::string& what, int err);

  std::string path_;    // as given, for messages
  std::string target_;  // where the data end up (symlinks resolved)
  std::string tmp_;     // temporary file ("" when writing a non-regular target directly)
  int slot_ = -1;       // its entry in the signal handler's table (-1: none)
  int fd_ = -1;
  bool committed_ = false;
  uint64_t written_ = 0;
  std::string buf_;
};

/// Writes `content` to `path` through an AtomicFile. Throws IoError.
void write_file_atomic(const std::string& path, std::string_view content);

/// Writes all of `content` to the open descriptor `fd` (e.g. 1 for `-o -`),
/// retrying partial writes and EINTR. Throws IoError "name: write failed after
/// N bytes: reason". Flush any stdio buffer on the same descriptor first.
void write_all(int fd, std::string_view content, const std::string& name);

/// The file writing `path` replaces: symbolic links followed, also a link
/// whose file does not exist yet (AtomicFile then creates that file and keeps
/// the link), up to 40 links; made absolute and normal. Never throws (a path
/// that cannot be resolved further is returned as far as it got).
std::string resolve_links(const std::string& path);

/// Whether the output path `path` is this process's standard output: "-",
/// "/dev/stdout", "/proc/self/fd/1", "/dev/fd/1", or any name of the file,
/// pipe or terminal open as fd 1 (same device and inode by stat/fstat). Never throws.
bool names_stdout(const std::string& path);

/// Whether writing output `out` would replace the file `path` ("-" in either
/// is stdout): the same file after following links (resolve_links, also a link
/// to a file not yet created), or two names of one existing file (a hard link,
/// /dev/stdout and "-"). Never throws.
bool same_output_file(const std::string& out, const std::string& path);

/// Refuses an output path that cannot be written (missing directory, a
/// directory, no permission) before anything runs, naming `option`:
/// "--output out/x.json: directory out does not exist". Throws ArgumentError
/// (exit 2); the write itself goes through AtomicFile later.
void check_writable(const std::string& option, const std::string& path);

}  // namespace kveval::util
