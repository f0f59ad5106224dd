// Engine and the cached oneDNN matmul primitives behind backend::matmul.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "backend/backend.hpp"
#include "backend/engine_impl.hpp"

namespace kveval::backend {

Engine::Engine(int threads) : impl_(std::make_unique<Impl>()) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  impl_->threads = threads;
  omp_set_num_threads(threads);
  try {
    impl_->eng = dnnl::engine(dnnl::engine::kind::cpu, 0);
    impl_->strm = dnnl::stream(impl_->eng);
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, "engine creation");
  }
}
Engine::~Engine() = default;
int Engine::threads() const { return impl_->threads; }
uint64_t Engine::primitives_created() const { return impl_->created; }
uint64_t Engine::buffer_allocations() const { return impl_->allocations; }
Engine::Impl& Engine::impl() { return *impl_; }

namespace {
void run_matmul(Engine& engine, const float* x, int64_t m, int64_t k, const void* wt, Dtype wdt, int64_t n, int64_t ld,
                float* y, bool accumulate, bool batch_invariant = false);
}  // namespace

void matmul(Engine& engine, const float* x, int64_t m, const Weight& w, float* y, bool accumulate,
            bool batch_invariant) {
  if (m <= 0) return;
  auto& im = engine.impl();
  if (batch_invariant && m < kInvariantMinRows) {
    const int64_t K = w.n_in(), N = w.n_out(), M = kInvariantMinRows;
    if (im.pad_x.reserve(static_cast<size_t>(M * K))) ++im.allocations;
    if (im.pad_y.reserve(static_cast<size_t>(M * N))) ++im.allocations;
    std::memcpy(im.pad_x.data(), x, sizeof(float) * static_cast<size_t>(m * K));
    std::fill(im.pad_x.data() + m * K, im.pad_x.data() + M * K, 0.0f);
    if (accumulate) std::memcpy(im.pad_y.data(), y, sizeof(float) * static_cast<size_t>(m * N));
    std::fill(im.pad_y.data() + m * N, im.pad_y.data() + M * N, 0.0f);
    matmul(engine, im.pad_x.data(), M, w, im.pad_y.data(), accumulate, true);  // M = 16: runtime-M kernel
    std::memcpy(y, im.pad_y.data(), sizeof(float) * static_cast<size_t>(m * N));
    return;
  }
  if (!batch_invariant && m >= 2 && m <= kInvariantMinRows && w.ld() != w.n_out()) {
    // Decode steps of 2..16 rows on a padded weight (ld > n_out, e.g. the fused
    // [gate; up] of 2 x 2048 rows): oneDNN 2.6 runs its brgemm kernel only when
    // the weights' row stride equals their width, else jit sgemm, measured 17.6
    // vs 14.9 ms CPU per 12 [768 x 4096] products at M = 8 on one thread. So
    // multiply by all ld columns (the padding ones are zero) into [m, ld] rows
    // and copy the n_out real columns out.
    const int64_t N = w.n_out(), LD = w.ld();
    if (im.pad_y.reserve(static_cast<size_t>(m * LD))) ++im.allocations;
    float* t = im.pad_y.data();
    if (accumulate)
      for (int64_t r = 0; r < m; ++r) std::memcpy(t + r * LD, y + r * N, sizeof(float) * static_cast<size_t>(N));
    run_matmul(engine, x, m, w.n_in(), w.raw(), w.dtype(), LD, LD, t, accumulate);
    for (int64_t r = 0; r < m; ++r) std::memcpy(y + r * N, t + r * LD, sizeof(float) * static_cast<size_t>(N));
    return;
  }
  run_matmul(engine, x, m, w.n_in(), w.raw(), w.dtype(), w.n_out(), w.ld(), y, accumulate, batch_invariant);
}

namespace {

// y[m, n] (+)= x[m, k] · wt[k, n] (row stride ld, f32 or bf16 elements: wdt) with a cached oneDNN primitive.
void run_matmul(Engine& engine, const float* x, int64_t m, int64_t k, const void* wt, Dtype wdt, int64_t n, int64_t ld,
                float* y, bool accumulate, bool batch_invariant) {
  auto& im = engine.impl();
  // Below ~1M multiply-adds (tens of microseconds on one core) a fork/join of
  // the thread team costs more than it saves, and far more on a busy machine.
  const bool small = m * n * k < (int64_t(1) << 20);
  omp_set_num_threads(small ? 1 : im.threads);
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{im.threads};
  // Decode steps of 2..16 rows: fixed-M primitive (brgemm); one row, scoring and
  // batch-invariant passes: runtime M (jit sgemm, whose M = 1 kernel is a gemv).
  // Measured on AMD Zen 4 (oneDNN 2.6, s110m, 1 thread, tg64): the runtime-M
  // primitive decodes one row 1.3x (f32) and 1.6x (bf16) faster than the fixed
  // M = 1 one; at M = 2 they tie, at M = 8 the fixed-M one is 1.2x faster.
  const bool one_row = m == 1 && !batch_invariant;
  const int64_t key_m = (!batch_invariant && m <= kInvariantMinRows && !one_row) ? m : 0;
  auto& e = im.get(key_m, k, n, ld, accumulate, wdt);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  void* src_ptr = const_cast<float*>(x);
  if (wdt == Dtype::BF16) {
    const size_t nx = static_cast<size_t>(m * k);
    if (im.x_bf16.reserve((nx + 1) / 2)) ++im.allocations;
    to_bf16(x, reinterpret_cast<uint16_t*>(im.x_bf16.data()), nx);
    src_ptr = im.x_bf16.data();
  }
  const dt in_dt = wdt == Dtype::BF16 ? dt::bf16 : dt::f32;
  try {
    if (key_m > 0 || one_row) {
      if (!e.src) {  // the runtime-M entry's one-row objects get concrete dims
        e.src = dnnl::memory(one_row ? dnnl::memory::desc({1, k}, in_dt, tag::ab) : e.src_md, im.eng, DNNL_MEMORY_NONE);
        e.wei = dnnl::memory(e.wei_md, im.eng, DNNL_MEMORY_NONE);
        e.dst = dnnl::memory(one_row ? dnnl::memory::desc({1, n}, dt::f32, tag::ab) : e.dst_md, im.eng, DNNL_MEMORY_NONE);
        e.scratch = dnnl::memory(e.scratch_md, im.eng, DNNL_MEMORY_NONE);
      }
      e.src.set_data_handle(src_ptr);
      e.wei.set_data_handle(const_cast<void*>(wt));
      e.dst.set_data_handle(y);
      e.scratch.set_data_handle(im.scratch.data());
      e.prim.execute(im.strm, {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.wei}, {DNNL_ARG_DST, e.dst},
                               {DNNL_ARG_SCRATCHPAD, e.scratch}});
    } else {
      dnnl::memory src({{m, k}, in_dt, tag::ab}, im.eng, src_ptr);
      dnnl::memory wei(e.wei_md, im.eng, const_cast<void*>(wt));
      dnnl::memory dst({{m, n}, dt::f32, tag::ab}, im.eng, y);
      dnnl::memory scratch(e.scratch_md, im.eng, im.scratch.data());
      e.prim.execute(im.strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, scratch}});
    }
    im.strm.wait();
  } catch (const dnnl::error& e2) {
    rethrow_dnnl(e2, fmt::format("matmul [{}x{}]·[{}x{}]ᵀ", m, k, n, k).c_str());
  }
}

}  // namespace

}  // namespace kveval::backend
