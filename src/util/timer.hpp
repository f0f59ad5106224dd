#pragma once
// Wall-clock timing (steady clock), in seconds.
#include <chrono>

namespace kveval {

/// Monotonic stopwatch; `seconds()` is the wall time since construction or the last `reset()`.
class Stopwatch {
 public:
  Stopwatch() : t0_(std::chrono::steady_clock::now()) {}
  void reset() { t0_ = std::chrono::steady_clock::now(); }
  /// Elapsed wall time in seconds.
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }

 private:
  std::chrono::steady_clock::time_point t0_;
};

}  // namespace kveval
