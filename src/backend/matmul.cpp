// Engine and the cached oneDNN matmul primitives behind backend::matmul.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "backend/bf16_panels.hpp"
#include "backend/engine_impl.hpp"
#include "backend/gemv.hpp"
#include "backend/int8_dot.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/qblocks.hpp"

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
void Engine::set_block_tiles_bf16(bool bf16) { impl_->block_tiles_bf16 = bf16; }
bool Engine::block_tiles_bf16() const { return impl_->block_tiles_bf16; }
void Engine::set_matmul_mode(MatmulMode m) { impl_->matmul_mode = m; }
MatmulMode Engine::matmul_mode() const { return impl_->matmul_mode; }
const char* to_string(MatmulMode m) { return m == MatmulMode::Int8 ? "int8" : "exact"; }

namespace {

void run_matmul(Engine& engine, const float* x, int64_t m, int64_t k, const void* wt, Dtype wdt, int64_t n, int64_t ld,
                bool w_rows, float* y, int64_t ldy, bool accumulate, bool batch_invariant, bool panels = false,
                const uint16_t* x_bf16 = nullptr);

/// x [n] rounded to bf16 (to_bf16) into the engine's x_bf16 buffer, once for
/// every oneDNN product of a call on bf16 weights.
const uint16_t* x_to_bf16(Engine::Impl& im, const float* x, int64_t n) {
  if (im.x_bf16.reserve((static_cast<size_t>(n) + 1) / 2)) ++im.allocations;
  auto* xb = reinterpret_cast<uint16_t*>(im.x_bf16.data());
  to_bf16(x, xb, static_cast<size_t>(n));
  return xb;
}

/// True when oneDNN's sgemm runs on AVX2 or older (no AVX-512): its kernels
/// there are not row-invariant across M (see matmul's batch_invariant).
bool sgemm_needs_row_blocks() {
  static const bool v = !onednn_isa_includes(dnnl::cpu_isa::avx512_core);  // also AVX2-VNNI CPUs
  return v;
}

/// True when oneDNN's effective ISA has AMX tiles.
bool has_amx() {
  static const bool v = onednn_isa_includes(dnnl::cpu_isa::avx512_core_amx);
  return v;
}

/// True when decode steps of 2..16 rows on `wdt` weights run a fixed-M
/// primitive (brgemm), false for the runtime-M one. BF16 without AMX takes the
/// runtime-M primitive, which is faster there on row-major weights; F32 keeps
/// brgemm, and so does BF16 on AMX (docs/design/matmul-paths.md). This applies to
/// row-major BF16 weights only: with AVX512-BF16 (AMX included) they are in
/// panels and every oneDNN product on them is fixed-M (run_panels).
bool fixed_m_decode(Dtype wdt) { return wdt != Dtype::BF16 || has_amx(); }

/// Rows of the next batch-invariant block for `left` rows on AVX2: the largest of
/// 192, 96, 48, 24, 16 that fits, else all of them (under 16: padded to 16).
int64_t invariant_block(int64_t left) {
  for (int64_t s : {192, 96, 48, 24, 16})
    if (s <= left) return s;
  return left;
}

/// y[m, n] (row stride ldy) (+)= x[m, k] · wt[k, n] with each row's bits the same
/// for every m: under 16 rows through a zero-padded 16-row product (oneDNN's sgemm
/// takes another kernel below 16 rows; measured on oneDNN 2.6: rows agree bit for
/// bit for every M >= 16 on AVX-512). oneDNN 2.6's AVX2 sgemm computes rows in
/// tiles of 24 and runs the tail rows of M (e.g. rows 18-19 of M = 20, rows 30-31
/// of M = 32) and, from M = 384 on, other blockings with another summation order:
/// there rows go in blocks of 192, 96, 48, 24 or 16 (tests/backend/test_invariance.cpp).
void run_invariant(Engine& engine, const float* x, int64_t m, int64_t k, const void* wt, Dtype wdt, int64_t n,
                   int64_t ld, bool w_rows, float* y, int64_t ldy, bool accumulate) {
  auto& im = engine.impl();
  if (m > kInvariantMinRows && sgemm_needs_row_blocks() && invariant_block(m) < m) {
    for (int64_t r = 0; r < m;) {
      const int64_t b = invariant_block(m - r);
      run_invariant(engine, x + r * k, b, k, wt, wdt, n, ld, w_rows, y + r * ldy, ldy, accumulate);
      r += b;
    }
    return;
  }
  if (m >= kInvariantMinRows) {
    run_matmul(engine, x, m, k, wt, wdt, n, ld, w_rows, y, ldy, accumulate, true);
    return;
  }
  const int64_t M = kInvariantMinRows;
  if (im.pad_x.reserve(static_cast<size_t>(M * k))) ++im.allocations;
  if (im.pad_y.reserve(static_cast<size_t>(M * n))) ++im.allocations;
  std::memcpy(im.pad_x.data(), x, sizeof(float) * static_cast<size_t>(m * k));
  std::fill(im.pad_x.data() + m * k, im.pad_x.data() + M * k, 0.0f);
  if (accumulate)
    for (int64_t r = 0; r < m; ++r) std::memcpy(im.pad_y.data() + r * n, y + r * ldy, sizeof(float) * static_cast<size_t>(n));
  std::fill(im.pad_y.data() + m * n, im.pad_y.data() + M * n, 0.0f);
  run_matmul(engine, im.pad_x.data(), M, k, wt, wdt, n, ld, w_rows, im.pad_y.data(), n, accumulate, true);
  for (int64_t r = 0; r < m; ++r) std::memcpy(y + r * ldy, im.pad_y.data() + r * n, sizeof(float) * static_cast<size_t>(n));
}

/// Rows of the next oneDNN product on a BF16 weight in panels for `left` rows:
/// the largest of 512, 256, 128, 64, 32 and 16 that fits, else all of them.
/// Each row count is its own fixed-M primitive (blocked weights have no fast
/// runtime-M kernel in oneDNN 2.6), so a pass of any length needs at most 21
/// per product shape.
int64_t panel_block(int64_t left) {
  for (int64_t s : {512, 256, 128, 64, 32, 16})
    if (s <= left) return s;
  return left;
}

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for a BF16 weight in panels
/// (Weight::bf16_panels) through oneDNN's brgemm, in blocks of panel_block
/// rows. Each row's bits are the same whatever the block size and thread count
/// (oneDNN 2.6, avx512_core_bf16; tests/backend/test_invariance.cpp), so this
/// is also the batch-invariant path. It is at least as fast as the runtime-M
/// product on row-major Wᵀ at every M measured (docs/design/matmul-paths.md).
void run_panels(Engine& engine, const float* x, int64_t m, const Weight& w, float* y, bool accumulate) {
  const int64_t K = w.n_in(), N = w.n_out();
  const uint16_t* xb = x_to_bf16(engine.impl(), x, m * K);
  for (int64_t r = 0; r < m;) {
    const int64_t b = panel_block(m - r);
    run_matmul(engine, x + r * K, b, K, w.raw(), Dtype::BF16, N, w.ld(), false, y + r * N, N, accumulate, false, true,
               xb + r * K);
    r += b;
  }
}

/// Block and file-block weights for longer products or batch-invariant passes: rows of W are
/// widened to f32 a chunk (~4 MiB) at a time into an engine buffer, row-major
/// [rows, n_in] (oneDNN reads it as Wᵀ in "ba" layout, measured on oneDNN 2.6
/// as fast as "ab" from M = 64 up), and multiplied by oneDNN's sgemm into the
/// matching columns of y; the chunks are the same for every m, so batch
/// invariance holds as for F32 weights.
void matmul_widened(Engine& engine, const float* x, int64_t m, const Weight& w, float* y, bool accumulate,
                         bool batch_invariant) {
  auto& im = engine.impl();
  const int64_t K = w.n_in(), N = w.n_out();
  const int64_t ldc = (K * 4) % 4096 == 0 ? K + 16 : K;  // off 4 KiB strides (see Weight::ld)
  const int64_t chunk = std::min(N, std::max<int64_t>(64, (int64_t(1) << 20) / ldc / 64 * 64));  // rows of W
  if (im.widened.reserve(static_cast<size_t>(chunk * ldc))) ++im.allocations;
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nc = std::min(chunk, N - n0);
    widen_rows(w, n0, nc, im.widened.data(), ldc, im.threads);
    if (batch_invariant)
      run_invariant(engine, x, m, K, im.widened.data(), Dtype::F32, nc, ldc, true, y + n0, N, accumulate);
    else
      run_matmul(engine, x, m, K, im.widened.data(), Dtype::F32, nc, ldc, true, y + n0, N, accumulate, false);
  }
}

/// y[b, nc] (row stride ldy) (+)= x[b, K] · the panels' nc columns for a
/// chunk of panels (matmul_widened_bf16). oneDNN 2.6's brgemm on blocked
/// weights wants a dense destination (a strided one gets the reference
/// kernel): with ldy > nc the rows go through [b, nc] rows of pad_y, copied
/// by every thread.
void run_dense_dst(Engine& engine, const float* x, const uint16_t* xb, int64_t b, int64_t K, const uint32_t* panels,
                   int64_t nc, int64_t ld, float* y, int64_t ldy, bool accumulate) {
  auto& im = engine.impl();
  if (ldy == nc) {
    run_matmul(engine, x, b, K, panels, Dtype::BF16, nc, ld, false, y, nc, accumulate, false, true, xb);
    return;
  }
  if (im.pad_y.reserve(static_cast<size_t>(b * nc))) ++im.allocations;
  float* t = im.pad_y.data();
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(nc);
  const int threads = b * nc >= 65536 ? im.threads : 1;
  if (accumulate) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < b; ++i) std::memcpy(t + i * nc, y + i * ldy, row_bytes);
  }
  run_matmul(engine, x, b, K, panels, Dtype::BF16, nc, ld, false, t, nc, accumulate, false, true, xb);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t i = 0; i < b; ++i) std::memcpy(y + i * ldy, t + i * nc, row_bytes);
}

/// Most bf16 elements matmul_widened_bf16 widens before multiplying (64 MiB):
/// every matrix of a Llama-3.2-1B layer at once. Narrower chunks were measured
/// slower at 2 threads (pp512 148 tok/s at 2 MiB against 173 at 64 MiB, median
/// of 5 alternating runs on Q4_K_M): each chunk reads all of x again, and a
/// chunk narrower than the output goes through pad_y (run_dense_dst).
constexpr int64_t kWidenedBf16Elements = int64_t(32) << 20;

/// Rows of W matmul_widened_bf16's threads each widen to f32 at a time (16 x n_in floats, in L2).
constexpr int64_t kWidenTile = 16;

/// bf16 elements of one 64-column panel of oneDNN's BA16a64b2a layout for n_in inputs: n_in rounded up to the
/// brgemm's k block of 32, times 64 columns (Weight::ld of a panel weight). matmul_widened_bf16 and
/// widened_bf16_bytes size the widened panels by it.
int64_t bf16_panel_ld(int64_t n_in) { return (n_in + 31) / 32 * 32 * 64; }

/// Rows of W (a multiple of 64) matmul_widened_bf16 widens at a time for an n_out x n_in weight whose
/// panels hold `ld` bf16 elements each.
int64_t bf16_chunk_rows(int64_t n_out, int64_t ld) {
  return std::min((n_out + 63) / 64 * 64, std::max<int64_t>(64, kWidenedBf16Elements / ld * 64));
}

/// Kept-block weights on CPUs with bf16 dot products (kernel_has_bf16_dot, the
/// condition under which BF16 weights live in panels): a chunk of 64-row panels
/// (the whole matrix up to kWidenedBf16Elements) at a time, each thread widens its panels' rows of W to f32
/// 16 rows at a time, rounds them to bf16
/// (f32_to_bf16, as a BF16 weight is rounded at load) into oneDNN's BA16a64b2a
/// layout (pack_panel_pairs_normal; Weight::bf16_panels, zero padding), and multiplied
/// as run_panels does (x rounded to bf16 once per call), so batch-invariant passes have the invariance BF16 weights have
/// (bf16_paths_agree). Scoring thus runs at the speed of BF16 weights on the
/// values a BF16 weight rounded from the same blocks holds (the same bits for
/// many-row products: tests/backend/test_qblocks.cpp), and no widened copy is kept.
void matmul_widened_bf16(Engine& engine, const float* x, int64_t m, const Weight& w, float* y, bool accumulate) {
  auto& im = engine.impl();
  const uint16_t* xb = x_to_bf16(im, x, m * w.n_in());
  const int64_t K = w.n_in(), N = w.n_out();  // K: a multiple of the block size (32), so pairs (k, k + 1) never straddle it
  const int64_t ld = bf16_panel_ld(K);
  const int64_t chunk = bf16_chunk_rows(N, ld);
  constexpr int64_t kTile = kWidenTile;
  const int threads = std::max(1, im.threads);
  const size_t tmp_elems = static_cast<size_t>(threads * kTile * K), bf16_elems = static_cast<size_t>(chunk / 64 * ld);
  if (im.widened.reserve(tmp_elems + (bf16_elems + 1) / 2)) ++im.allocations;
  auto* panels = reinterpret_cast<uint32_t*>(im.widened.data() + tmp_elems);  // [np][ld / 128][64] pairs of bf16
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t nc = std::min(chunk, N - n0), np = (nc + 63) / 64, kp = K / 2;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t p = 0; p < np; ++p) {
      float* tmp = im.widened.data() + static_cast<int64_t>(omp_get_thread_num()) * kTile * K;
      uint32_t* dst = panels + p * (ld / 2);
      const int64_t rows_here = std::min<int64_t>(64, nc - p * 64);
      if (rows_here < 64) std::memset(dst, 0, sizeof(uint16_t) * static_cast<size_t>(ld));
      for (int64_t j0 = 0; j0 < rows_here; j0 += kTile) {
        const int64_t jn = std::min(kTile, rows_here - j0);
        widen_rows(w, n0 + p * 64 + j0, jn, tmp, K, 1);
        pack_panel_pairs_normal(tmp, K, jn, kp, dst + j0);
      }
    }
    for (int64_t r = 0; r < m;) {
      const int64_t b = panel_block(m - r);
      run_dense_dst(engine, x + r * K, xb + r * K, b, K, panels, nc, ld, y + r * N + n0, N, accumulate);
      r += b;
    }
  }
}

}  // namespace

size_t widened_bf16_bytes(int64_t n_out, int64_t n_in, int threads) {
  const int64_t ld = bf16_panel_ld(n_in);  // as matmul_widened_bf16: its f32 tiles, then one chunk of panels
  const auto tiles = static_cast<size_t>(std::max(1, threads)) * kWidenTile * static_cast<size_t>(n_in) * sizeof(float);
  return tiles + static_cast<size_t>(bf16_chunk_rows(n_out, ld) / 64 * ld) * sizeof(uint16_t);
}

int64_t decode_invariant_rows(Dtype wdt) {
  if (wdt == Dtype::F32) return kernel_isa() == KernelIsa::Avx512 ? kGemvMaxRows : 0;
  return wdt == Dtype::BF16 && kernel_has_bf16_dot() && !has_amx() ? kGemvMaxRows : 0;
}

bool bf16_paths_agree() {
  static const bool v = [] {
    // AMX: oneDNN's brgemm takes tiles for some row counts and AVX512-BF16 for
    // others, so a probe at one M cannot vouch for every M (tests/backend: gemv).
    if (!kernel_has_bf16_dot() || !bf16_matmul_available() || has_amx()) return false;
    try {
      // Two products spanning both chunk sizes (bf16_chunk), a partial panel,
      // an odd n_in and values of mixed sign and magnitude; 3 rows.
      const int omp_threads = omp_get_max_threads();  // Engine's constructor sets it
      struct Restore {
        int n;
        ~Restore() { omp_set_num_threads(n); }
      } restore{omp_threads};
      Engine eng(1);
      uint32_t state = 12345;
      const auto next = [&state] {
        state = state * 1664525u + 1013904223u;
        return (static_cast<float>(state >> 8) / 16777216.0f - 0.5f) * ((state & 3) == 0 ? 8.0f : 1.0f);
      };
      for (const auto& [n_out, n_in] : {std::pair<int64_t, int64_t>{80, 777}, {70, 2081}}) {
        std::vector<float> wv(static_cast<size_t>(n_out * n_in)), x(static_cast<size_t>(3 * n_in));
        for (float& f : wv) f = next();
        for (float& f : x) f = next();
        const Weight w(wv, n_out, n_in, Dtype::BF16);
        std::vector<float> a(static_cast<size_t>(3 * n_out)), b(a.size()), scratch(static_cast<size_t>(gemv_scratch(w, 3)));
        gemv_rows(x.data(), 3, w, a.data(), false, 1, scratch.data());
        run_panels(eng, x.data(), 3, w, b.data(), false);
        if (std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) != 0) return false;
      }
      return true;
    } catch (const Error&) {
      return false;
    }
  }();
  return v;
}

bool matmul_rows_invariant(Dtype wdt) { return wdt == Dtype::BF16 && bf16_paths_agree(); }

void matmul(Engine& engine, const float* x, int64_t m, const Weight& w, float* y, bool accumulate,
            bool batch_invariant) {
  if (m <= 0) return;
  auto& im = engine.impl();
  if (is_file_blocks(w.dtype())) {
    // Decode steps and short cached passes: the block kernel; longer and
    // batch-invariant products widen, a fixed cost per pass (dequantizing every
    // weight) against the block kernel's cost per row. The crossover measured
    // at about 20 rows on one thread and 32 on more (docs/design/decode-kernels.md),
    // so a dynamic-batching pass that prefills a short prompt while the other
    // rows decode stays on the blocks.
    const int64_t block_rows = im.threads == 1 ? 20 : 32;
    if (im.matmul_mode == MatmulMode::Int8 && !batch_invariant && m <= kInt8MaxRows && int8_kernel(w.dtype())) {
      if (im.int8_x.reserve(static_cast<size_t>(int8_scratch_floats(kInt8MaxRows, w.n_in())))) ++im.allocations;
      int8_matmul(x, m, w, y, accumulate, im.threads, im.int8_x.data());
    } else if ((batch_invariant || m > block_rows) && im.block_tiles_bf16 && kernel_has_bf16_dot())
      matmul_widened_bf16(engine, x, m, w, y, accumulate);
    else if (batch_invariant || m > block_rows)
      matmul_widened(engine, x, m, w, y, accumulate, batch_invariant);
    else
      blocks_matmul(x, m, w, y, accumulate, im.threads);
    return;
  }
  // Decode steps in kveval's kernels (gemv.cpp): one row of F32 always and of
  // BF16 with AVX512-BF16, and up to decode_invariant_rows rows (each row's
  // bits as alone). F32: the kernel ties with oneDNN's fixed-M brgemm over
  // 2-8 rows; BF16: faster than oneDNN's runtime-M product up to 8 rows, slower
  // at 16 (docs/design/matmul-paths.md).
  const bool one_row_kernel = w.dtype() == Dtype::F32 || (w.dtype() == Dtype::BF16 && kernel_has_bf16_dot());
  if (!batch_invariant && one_row_kernel && (m == 1 || m <= decode_invariant_rows(w.dtype()))) {
    const int64_t need = gemv_scratch(w, m);
    if (need > 0 && im.gemv_part.reserve(static_cast<size_t>(need))) ++im.allocations;
    gemv_rows(x, m, w, y, accumulate, im.threads, im.gemv_part.data());
    return;
  }
  if (w.dtype() == Dtype::BF16 && w.bf16_panels()) {
    run_panels(engine, x, m, w, y, accumulate);
    return;
  }
  if (batch_invariant) {
    run_invariant(engine, x, m, w.n_in(), w.raw(), w.dtype(), w.n_out(), w.ld(), false, y, w.n_out(), accumulate);
    return;
  }
  if (m >= 2 && m <= kInvariantMinRows && w.ld() != w.n_out() && fixed_m_decode(w.dtype())) {
    // Decode steps of 2..16 rows on a padded weight (ld > n_out, e.g. the fused
    // [gate; up] of 2 x 2048 rows): oneDNN 2.6 runs its brgemm kernel only when
    // the weights' row stride equals their width, else the slower jit sgemm
    // (docs/design/matmul-paths.md). So
    // multiply by all ld columns (the padding ones are zero) into [m, ld] rows
    // and copy the n_out real columns out.
    const int64_t N = w.n_out(), LD = w.ld();
    if (im.pad_y.reserve(static_cast<size_t>(m * LD))) ++im.allocations;
    float* t = im.pad_y.data();
    if (accumulate)
      for (int64_t r = 0; r < m; ++r) std::memcpy(t + r * LD, y + r * N, sizeof(float) * static_cast<size_t>(N));
    run_matmul(engine, x, m, w.n_in(), w.raw(), w.dtype(), LD, LD, false, t, LD, accumulate, false);
    for (int64_t r = 0; r < m; ++r) std::memcpy(y + r * N, t + r * LD, sizeof(float) * static_cast<size_t>(N));
    return;
  }
  run_matmul(engine, x, m, w.n_in(), w.raw(), w.dtype(), w.n_out(), w.ld(), false, y, w.n_out(), accumulate, false);
}

namespace {

// y[m, n] (row stride ldy) (+)= x[m, k] · wt[k, n] (row stride ld, f32 or bf16
// elements: wdt; with w_rows, wt holds W [n, k] with row stride ld instead) with a
// cached oneDNN primitive.
void run_matmul(Engine& engine, const float* x, int64_t m, int64_t k, const void* wt, Dtype wdt, int64_t n, int64_t ld,
                bool w_rows, float* y, int64_t ldy, bool accumulate, bool batch_invariant, bool panels,
                const uint16_t* x_bf16) {
  auto& im = engine.impl();
  // Below ~1M multiply-adds (tens of microseconds on one core) a fork/join of
  // the thread team costs more than it saves, and far more on a busy machine;
  // decode steps split from kDecodeParallelMacs (kernel_isa.hpp, measured).
  // Batch-invariant passes keep 2^20: oneDNN's AVX2 sgemm blocks rows by thread
  // count, so moving the boundary changes which row counts agree bit for bit
  // (tests model.avx2, eval.avx2).
  const bool small = m * n * k < (batch_invariant ? int64_t(1) << 20 : kDecodeParallelMacs);
  omp_set_num_threads(small ? 1 : im.threads);
  struct Restore {
    int n;
    ~Restore() { omp_set_num_threads(n); }
  } restore{im.threads};
  // Decode steps of 2..16 rows: fixed-M primitive (brgemm); one row, scoring and
  // batch-invariant passes: runtime M (jit sgemm, whose M = 1 kernel is a gemv;
  // faster than a fixed M = 1 primitive, docs/design/matmul-paths.md; BF16
  // without AMX keeps runtime M for 2..16 rows too: fixed_m_decode).
  // Weights in panels: always fixed M (run_panels).
  const bool one_row = m == 1 && !batch_invariant && !panels;
  const int64_t key_m =
      panels || (!batch_invariant && m <= kInvariantMinRows && !one_row && fixed_m_decode(wdt)) ? m : 0;
  auto& e = im.get(key_m, k, n, ld, w_rows, ldy, accumulate, wdt, panels);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  void* src_ptr = const_cast<float*>(x);
  if (wdt == Dtype::BF16) src_ptr = const_cast<uint16_t*>(x_bf16 ? x_bf16 : x_to_bf16(im, x, m * k));
  const dt in_dt = wdt == Dtype::BF16 ? dt::bf16 : dt::f32;
  try {
    if (key_m > 0 || one_row) {
      if (!e.src) {  // the runtime-M entry's one-row objects get concrete dims
        e.src = dnnl::memory(one_row ? dnnl::memory::desc({1, k}, in_dt, tag::ab) : e.src_md, im.eng, DNNL_MEMORY_NONE);
        e.wei = dnnl::memory(e.wei_md, im.eng, DNNL_MEMORY_NONE);
        e.dst = dnnl::memory(one_row ? dnnl::memory::desc({1, n}, dt::f32, dnnl::memory::dims{ldy, 1}) : e.dst_md, im.eng, DNNL_MEMORY_NONE);
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
      dnnl::memory dst({{m, n}, dt::f32, dnnl::memory::dims{ldy, 1}}, im.eng, y);
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
