#pragma once
// Exception types shared by every layer. Each message is one line that names
// the file, key, tensor or JSON path at fault and, where possible, what to do.
#include <stdexcept>
#include <string>

namespace kveval {

/// Base of every error kveval throws on purpose.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// A model file (GGUF) is malformed, truncated or unsupported.
struct FormatError : Error {
  using Error::Error;
};

/// A KV-cache operation was called in a state that does not allow it
/// (not set up, over capacity, batch too large, ...).
struct CacheError : Error {
  using Error::Error;
};

/// The compute backend (oneDNN) failed; the message carries its status.
struct BackendError : Error {
  using Error::Error;
};

/// An evaluation spec or data file is invalid; the message names the JSON path.
struct SpecError : Error {
  using Error::Error;
};

/// An output file could not be written (disk full, I/O error, rename failed);
/// the message names the path and the system's reason (strerror).
struct IoError : Error {
  using Error::Error;
};

/// The planned memory (weights, KV cache, activations) exceeds what the
/// process may use (util/memory.hpp); nothing was allocated.
struct MemoryError : Error {
  using Error::Error;
};

/// A caller passed arguments that violate a documented precondition.
struct ArgumentError : Error {
  using Error::Error;
};

}  // namespace kveval
