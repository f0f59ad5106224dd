#pragma once
// Live progress of `kveval run` on stderr, like the tools people know (tqdm,
// pv): per phase one line with done/total, percent, requests/s, tokens/s and
// ETA. On a terminal the line is redrawn in place at most 10 times a second and
// first drawn within 0.1 s of the phase's start (a drawing thread, so a long
// batch does not freeze it); elsewhere (CI logs) one plain line every
// `interval` seconds and one when the phase ends. Silent when disabled (--quiet).
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "util/timer.hpp"

namespace kveval::cli {

/// "1:02:03" or "2:03" (hours only when needed); "?" for a negative or non-finite value.
std::string format_eta(double seconds);

/// Shortest elapsed time (seconds) from which progress lines show rates and an ETA.
inline constexpr double kMinRateSeconds = 0.05;

/// One progress line: "loglikelihood: 64/300 (21%) | 12.3 req/s, 4.5k tok/s | ETA 0:19 | 5.2 s".
/// `elapsed` in seconds since the phase started; rates and ETA only once elapsed >=
/// kMinRateSeconds and done > 0 (a rate over microseconds, e.g. "6.4M req/s" for
/// a first request that ran before the phase's clock started, means nothing).
std::string progress_line(std::string_view phase, size_t done, size_t total, int64_t tokens, double elapsed);

class ProgressMeter {
 public:
  /// `tty`: redraw in place (else plain heartbeat lines every `interval` seconds, > 0).
  ProgressMeter(std::FILE* out, bool enabled, bool tty, double interval);
  ~ProgressMeter();
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;
  /// Reports a phase's state (thread-safe; cheap): a new phase name starts its clock.
  void update(std::string_view phase, size_t done, size_t total, int64_t tokens);

 private:
  void loop();
  void draw_locked(bool final_line);
  std::FILE* out_;
  bool enabled_, tty_;
  double interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, dirty_ = false, active_ = false;
  std::string phase_;
  size_t done_ = 0, total_ = 0;
  int64_t tokens_ = 0;
  Stopwatch phase_clock_, last_print_;
  std::thread thread_;
};

}  // namespace kveval::cli
