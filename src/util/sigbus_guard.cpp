#include "util/sigbus_guard.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>

namespace kveval {

namespace {

// The guarded range (process-wide: any thread may fault in it) and whether a fault was absorbed.
std::atomic<uintptr_t> g_lo{0}, g_hi{0};
std::atomic<bool> g_faulted{false};
struct sigaction g_previous;
std::mutex g_one_at_a_time;

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  const auto addr = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  const uintptr_t lo = g_lo.load(std::memory_order_acquire), hi = g_hi.load(std::memory_order_acquire);
  if (addr >= lo && addr < hi && hi > lo) {
    // Replace the page past the end of the file by zeros; returning retries the read.
    const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
    void* p = ::mmap(reinterpret_cast<void*>(addr & ~(page - 1)), page, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    if (p != MAP_FAILED) {
      g_faulted.store(true, std::memory_order_release);
      return;
    }
  }
  // Not ours (or no page could be mapped): the previous handler, or the default action on retry.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) {
      g_previous.sa_sigaction(sig, info, uctx);
      return;
    }
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(SIGBUS, &dfl, nullptr);
}

/// Installs the handler for a range; restores the previous one on destruction.
class Guard {
 public:
  Guard(const void* lo, size_t len) : lock_(g_one_at_a_time) {
    g_faulted.store(false);
    g_lo.store(reinterpret_cast<uintptr_t>(lo));
    g_hi.store(reinterpret_cast<uintptr_t>(lo) + len);
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    installed_ = sigaction(SIGBUS, &sa, &g_previous) == 0;
  }
  ~Guard() {
    if (installed_) sigaction(SIGBUS, &g_previous, nullptr);
    g_lo.store(0);
    g_hi.store(0);
  }
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

 private:
  std::lock_guard<std::mutex> lock_;
  bool installed_ = false;
};

}  // namespace

bool read_catching_sigbus(const void* lo, size_t len, const std::function<void()>& read) {
  Guard guard(lo, len);
  try {
    read();
  } catch (...) {
    if (g_faulted.load()) return false;  // the truncation caused it: report that instead
    throw;
  }
  return !g_faulted.load();
}

bool copy_from_mapping(void* dst, const void* src, size_t n) {
  return read_catching_sigbus(src, n, [&] { std::memcpy(dst, src, n); });
}

}  // namespace kveval
