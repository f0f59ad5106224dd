#include "cli/progress.hpp"

#include <chrono>
#include <cmath>

#include <fmt/format.h>

namespace kveval::cli {

std::string format_eta(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  auto t = static_cast<int64_t>(std::llround(s));
  if (t >= 3600) return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
  return fmt::format("{}:{:02}", t / 60, t % 60);
}

namespace {
std::string rate(double x) {
  if (x >= 1e6) return fmt::format("{:.1f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.1f}", x);
}
}  // namespace

std::string progress_line(std::string_view phase, size_t done, size_t total, int64_t tokens, double elapsed) {
  const double pct = total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
  std::string s = fmt::format("{}: {}/{} ({:.0f}%)", phase, done, total, std::floor(pct));
  if (elapsed >= kMinRateSeconds && done > 0) {
    s += fmt::format(" | {} req/s, {} tok/s", rate(static_cast<double>(done) / elapsed),
                     rate(static_cast<double>(tokens) / elapsed));
    if (done < total)
      s += " | ETA " + format_eta(elapsed * static_cast<double>(total - done) / static_cast<double>(done));
  }
  s += fmt::format(" | {:.1f} s", elapsed);
  return s;
}

ProgressMeter::ProgressMeter(std::FILE* out, bool enabled, bool tty, double interval)
    : out_(out), enabled_(enabled), tty_(tty), interval_(interval > 0 ? interval : 30.0) {
  if (enabled_) thread_ = std::thread([this] { loop(); });
}

ProgressMeter::~ProgressMeter() {
  if (!enabled_) return;
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ProgressMeter::update(std::string_view phase, size_t done, size_t total, int64_t tokens) {
  if (!enabled_) return;
  std::lock_guard<std::mutex> lk(mu_);
  const bool starts = phase != phase_ || !active_;
  done_ = done, total_ = total, tokens_ = tokens;
  if (starts) {
    phase_ = std::string(phase);
    phase_clock_.reset();
    last_print_.reset();
    active_ = true;
    if (done < total) draw_locked(false);  // drawn at once when a phase starts
  }
  dirty_ = true;
  if (done >= total) {
    draw_locked(true);  // the final state, then a new line
    active_ = false;
    dirty_ = false;
  }
}

void ProgressMeter::draw_locked(bool final_line) {
  std::string line = progress_line(phase_, done_, total_, tokens_, phase_clock_.seconds());
  if (tty_) fmt::print(out_, "\r{}\x1b[K{}", line, final_line ? "\n" : "");
  else fmt::print(out_, "kveval: {}\n", line);
  std::fflush(out_);
  last_print_.reset();
}

void ProgressMeter::loop() {
  std::unique_lock<std::mutex> lk(mu_);
  const auto tick = std::chrono::milliseconds(tty_ ? 100 : 250);
  while (!stop_) {
    cv_.wait_for(lk, tick);
    if (stop_ || !active_) continue;
    if (tty_ ? true : last_print_.seconds() >= interval_) draw_locked(false);
  }
}

}  // namespace kveval::cli
