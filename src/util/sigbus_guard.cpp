#include "util/sigbus_guard.hpp"

#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <atomic>
#include <cstring>

namespace kveval {

namespace {

// The guarded call of this thread (SIGBUS is delivered to the faulting thread).
// volatile + signal fences: the compiler must not sink these stores past the
// guarded reads (an inlined memcpy cannot "see" them and they would look dead).
thread_local sigjmp_buf* volatile t_jump = nullptr;
thread_local volatile uintptr_t t_lo = 0, t_hi = 0;
struct sigaction g_previous;

void on_sigbus(int sig, siginfo_t* info, void* uctx) {
  const auto addr = reinterpret_cast<uintptr_t>(info ? info->si_addr : nullptr);
  if (t_jump && addr >= t_lo && addr < t_hi) siglongjmp(*t_jump, 1);
  // Not ours: hand it to the previous handler, or let the default action run
  // when the faulting instruction is retried.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) g_previous.sa_sigaction(sig, info, uctx);
    return;
  }
  if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    g_previous.sa_handler(sig);
    return;
  }
  sigaction(SIGBUS, &g_previous, nullptr);
}

struct CopyArgs {
  void* dst;
  const void* src;
  size_t n;
};

void do_copy(void* p) {
  auto* a = static_cast<CopyArgs*>(p);
  std::memcpy(a->dst, a->src, a->n);
}

}  // namespace

bool call_catching_sigbus(const void* lo, size_t len, void (*fn)(void*), void* ctx) {
  struct sigaction sa {};
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  struct sigaction old {};
  if (sigaction(SIGBUS, &sa, &old) != 0) {  // cannot guard: run unguarded
    fn(ctx);
    return true;
  }
  g_previous = old;
  sigjmp_buf jump;
  bool ok = true;
  if (sigsetjmp(jump, 1) == 0) {  // 1: restore the signal mask on the jump back
    t_lo = reinterpret_cast<uintptr_t>(lo);
    t_hi = t_lo + len;
    t_jump = &jump;
    std::atomic_signal_fence(std::memory_order_seq_cst);
    fn(ctx);
    std::atomic_signal_fence(std::memory_order_seq_cst);
  } else {
    ok = false;
  }
  t_jump = nullptr;
  sigaction(SIGBUS, &old, nullptr);
  return ok;
}

bool copy_from_mapping(void* dst, const void* src, size_t n) {
  CopyArgs a{dst, src, n};
  return call_catching_sigbus(src, n, do_copy, &a);
}

}  // namespace kveval
