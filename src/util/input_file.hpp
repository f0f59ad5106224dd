#pragma once
// Reading input files (the spec, a --baseline results file, lm-eval task
// YAML files and their includes, JSONL data files, `tokenize -f` text) with
// two guarantees, so hostile or mistaken paths cost a bounded amount of time
// and memory:
//   - the file must be a regular file (symbolic links followed): a device
//     (/dev/zero), a FIFO, a socket or a directory is refused before a byte
//     is read (opening never blocks: O_NONBLOCK, then fstat);
//   - at most a limit of bytes is read: a file whose size is over it is
//     refused at once, and a file that reports a small size but reads longer
//     (/proc files, a file growing while read) is refused when the count
//     passes the limit.
// Limits (kInputLimitText, kInputLimitData) can be replaced for every input
// file by the environment variable KVEVAL_MAX_INPUT_BYTES (a decimal byte
// count). Every failure is one kveval::SpecError line naming the file (exit 2).
#include <cstdint>
#include <string>

namespace kveval::util {

/// Which default limit applies to an input file.
enum class InputKind {
  /// Parsed whole into memory (spec JSON, baseline JSON, task YAML, tokenize
  /// text): the parsed tree costs several times the text, so 64 MiB, far over
  /// any real spec or task file (kilobytes), keeps the worst case well under 1 GiB.
  Text,
  /// JSONL data files, read one line at a time: 4 GiB, over the largest
  /// lm-eval datasets stored as JSONL (hundreds of MiB); what the documents then
  /// cost in tokens is counted by the run's memory plan.
  Data,
};

inline constexpr uint64_t kInputLimitText = uint64_t{64} << 20;
inline constexpr uint64_t kInputLimitData = uint64_t{4} << 30;

/// The byte limit for `kind`: KVEVAL_MAX_INPUT_BYTES when set (one limit for
/// every input file), else kInputLimitText / kInputLimitData. Throws
/// ArgumentError when the variable is not a positive decimal byte count.
uint64_t input_limit(InputKind kind);

/// One input file open for reading (see the file comment). Not copyable.
class InputFile {
 public:
  /// Opens `path`. Throws SpecError "path: not found", "path: is a directory",
  /// "path: is a character device, not a regular file", "path: cannot open: reason",
  /// or "path: larger than the input file limit of 64.0 MiB (67108864 bytes; set
  /// KVEVAL_MAX_INPUT_BYTES to change it)".
  InputFile(std::string path, InputKind kind);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  /// The next line without its '\n' (a '\r' before it is kept); false at the
  /// end of the file. Throws SpecError on a read error or past the limit.
  bool getline(std::string& line);
  /// The rest of the file. Throws SpecError like getline.
  std::string read_all();
  const std::string& path() const { return path_; }
  uint64_t limit() const { return limit_; }

 private:
  /// Reads more bytes into buf_; false at the end of the file.
  bool fill();
  [[noreturn]] void over_limit() const;

  std::string path_;
  uint64_t limit_ = 0;
  int fd_ = -1;
  uint64_t size_hint_ = 0;  // the file's size when opened (it may change while read)
  uint64_t read_ = 0;       // bytes read from the file so far
  std::string buf_;    // bytes read and not yet returned start at pos_
  size_t pos_ = 0;
  bool eof_ = false;
};

/// The whole of `path` through an InputFile. Throws SpecError.
std::string read_input_file(const std::string& path, InputKind kind);

}  // namespace kveval::util
