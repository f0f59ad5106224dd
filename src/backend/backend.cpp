#include "backend/backend.hpp"

#include <omp.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "util/bf16.hpp"
#include "util/error.hpp"

namespace kveval::backend {

namespace {


[[noreturn]] void rethrow_dnnl(const dnnl::error& e, const char* what) {
  throw BackendError(fmt::format("oneDNN {} failed: {} (status {})", what, e.what(), static_cast<int>(e.status)));
}

}  // namespace

const char* to_string(Dtype d) { return d == Dtype::BF16 ? "bf16" : "f32"; }

uint16_t f32_to_bf16(float f) { return util::f32_to_bf16(f); }

float bf16_to_f32(uint16_t h) { return util::bf16_to_f32(h); }

void to_bf16(const float* x, uint16_t* y, size_t n) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (size_t i = 0; i < n; ++i) y[i] = util::f32_to_bf16(x[i]);
}

const char* cpu_isa_name() {
  using isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case isa::sse41: return "sse41";
    case isa::avx: return "avx";
    case isa::avx2: return "avx2";
    case isa::avx512_mic: return "avx512_mic";
    case isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case isa::avx512_core: return "avx512_core";
    case isa::avx512_core_vnni: return "avx512_core_vnni";
    case isa::avx512_core_bf16: return "avx512_core_bf16";
    case isa::avx512_core_amx: return "avx512_core_amx";
    case isa::avx2_vnni: return "avx2_vnni";
    default: return "other";
  }
}

bool cpu_has_bf16() {
  const auto i = dnnl::get_effective_cpu_isa();
  return i == dnnl::cpu_isa::avx512_core_bf16 || i == dnnl::cpu_isa::avx512_core_amx;
}

bool bf16_matmul_available() {
  static const bool ok = [] {
    try {
      using dt = dnnl::memory::data_type;
      using tag = dnnl::memory::format_tag;
      dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      dnnl::memory::desc a({16, 32}, dt::bf16, tag::ab), b({32, 16}, dt::bf16, tag::ab), c({16, 16}, dt::f32, tag::ab);
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return ok;
}

float* alloc_floats(size_t n) {
  constexpr size_t kHuge = size_t(2) << 20;
  size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
  const size_t align = bytes >= kHuge ? kHuge : 64;
  bytes = (bytes + align - 1) / align * align;
  void* p = std::aligned_alloc(align, bytes);
  if (!p) throw std::bad_alloc();
  if (align == kHuge) ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: failure is harmless
  return static_cast<float*>(p);
}

void free_floats(float* p) { std::free(p); }

PageBuffer PageBuffer::allocate(size_t n) {
  PageBuffer b;
  if (n == 0) return b;
  if (n > SIZE_MAX / sizeof(float)) throw std::bad_alloc();
  const size_t bytes = n * sizeof(float);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, bytes, MADV_NOHUGEPAGE);  // advice only: failure is harmless
  b.p_ = static_cast<float*>(p);
  b.bytes_ = bytes;
  return b;
}

PageBuffer::~PageBuffer() { reset(); }
PageBuffer::PageBuffer(PageBuffer&& o) noexcept : p_(o.p_), bytes_(o.bytes_) {
  o.p_ = nullptr;
  o.bytes_ = 0;
}
PageBuffer& PageBuffer::operator=(PageBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    p_ = o.p_;
    bytes_ = o.bytes_;
    o.p_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}
void PageBuffer::reset() {
  if (p_) ::munmap(p_, bytes_);
  p_ = nullptr;
  bytes_ = 0;
}

void Weight::Free::operator()(float* p) const { free_floats(p); }
void Buffer::Free::operator()(float* p) const { free_floats(p); }

Weight::Weight(std::span<const float> data, int64_t n_out, int64_t n_in, Dtype dtype) {
  if (n_out <= 0 || n_in <= 0 || data.size() != static_cast<size_t>(n_out * n_in))
    throw ArgumentError(fmt::format("Weight: {} values for a [{}, {}] matrix", data.size(), n_out, n_in));
  *this = Weight(n_out, n_in, dtype);
  set_rows(0, data.data(), n_out);
}

Weight::Weight(int64_t n_out, int64_t n_in, Dtype dtype) : n_out_(n_out), n_in_(n_in), dtype_(dtype) {
  if (n_out <= 0 || n_in <= 0) throw ArgumentError(fmt::format("Weight: bad shape [{}, {}]", n_out, n_in));
  const int64_t esize = dtype == Dtype::BF16 ? 2 : 4;
  ld_ = (n_out * esize) % 4096 == 0 ? n_out + 64 / esize : n_out;
  data_.reset(alloc_floats(static_cast<size_t>((ld_ * n_in * esize + 3) / 4)));
  if (ld_ != n_out) {  // keep the padding columns defined (zero bits in either dtype)
    auto* b = reinterpret_cast<std::byte*>(data_.get());
    for (int64_t k = 0; k < n_in; ++k)
      std::memset(b + (k * ld_ + n_out) * esize, 0, static_cast<size_t>((ld_ - n_out) * esize));
  }
}

void Weight::set_rows(int64_t row0, const float* src, int64_t rows) {
  if (row0 < 0 || rows < 0 || row0 + rows > n_out_)
    throw ArgumentError(fmt::format("Weight::set_rows: rows [{}, {}) outside [0, {})", row0, row0 + rows, n_out_));
  // Blocked transpose: src [rows, n_in] -> data [n_in, n_out] columns [row0, row0 + rows).
  constexpr int64_t B = 64;
  if (dtype_ == Dtype::BF16) {
    auto* dst = reinterpret_cast<uint16_t*>(data_.get());
    for (int64_t r0 = 0; r0 < rows; r0 += B)
      for (int64_t k0 = 0; k0 < n_in_; k0 += B) {
        const int64_t r1 = std::min(rows, r0 + B), k1 = std::min(n_in_, k0 + B);
        for (int64_t k = k0; k < k1; ++k)
          for (int64_t r = r0; r < r1; ++r) dst[k * ld_ + row0 + r] = f32_to_bf16(src[r * n_in_ + k]);
      }
    return;
  }
  float* dst = data_.get();
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t k0 = 0; k0 < n_in_; k0 += B) {
      const int64_t r1 = std::min(rows, r0 + B), k1 = std::min(n_in_, k0 + B);
      for (int64_t k = k0; k < k1; ++k)
        for (int64_t r = r0; r < r1; ++r) dst[k * ld_ + row0 + r] = src[r * n_in_ + k];
    }
}

void Weight::set_rows_bf16(int64_t row0, const uint16_t* src, int64_t rows) {
  if (row0 < 0 || rows < 0 || row0 + rows > n_out_)
    throw ArgumentError(fmt::format("Weight::set_rows_bf16: rows [{}, {}) outside [0, {})", row0, row0 + rows, n_out_));
  constexpr int64_t B = 64;  // blocked transpose as set_rows
  for (int64_t r0 = 0; r0 < rows; r0 += B)
    for (int64_t k0 = 0; k0 < n_in_; k0 += B) {
      const int64_t r1 = std::min(rows, r0 + B), k1 = std::min(n_in_, k0 + B);
      for (int64_t k = k0; k < k1; ++k)
        for (int64_t r = r0; r < r1; ++r) {
          const uint16_t h = src[r * n_in_ + k];
          if (dtype_ == Dtype::BF16)
            reinterpret_cast<uint16_t*>(data_.get())[k * ld_ + row0 + r] = h;
          else
            data_.get()[k * ld_ + row0 + r] = bf16_to_f32(h);
        }
    }
}

bool Buffer::reserve(size_t n) {
  if (n <= cap_ && p_) return false;
  p_.reset(alloc_floats(n));
  cap_ = n;
  return true;
}

struct MatmulEntry {
  dnnl::matmul prim;
  dnnl::memory::desc src_md, wei_md, dst_md, scratch_md;
  // Fixed-M entries keep their memory objects and only swap data handles, so a
  // decode step allocates nothing.
  dnnl::memory src, wei, dst, scratch;
};

struct Engine::Impl {
  dnnl::engine eng;
  dnnl::stream strm;
  int threads = 1;
  uint64_t created = 0;
  uint64_t allocations = 0;
  // key: (M or 0 for runtime M, n_in, n_out, ld, accumulate, dtype)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, Dtype>, MatmulEntry> matmuls;
  std::vector<uint8_t> scratch;  // user scratchpad shared by all primitives (grow at creation only)
  Buffer pad_x, pad_y;           // row padding for batch-invariant matmuls
  Buffer x_bf16;                 // activations converted to bf16 for BF16 weights
  void grow_scratch(size_t need) {
    if (need > scratch.size()) {
      scratch.resize(need);
      ++allocations;
    }
  }

  // Attention matmuls with runtime dims/strides: 0 = S = Q·Kᵀ, 1 = O = S·V.
  std::map<std::pair<int, int64_t>, MatmulEntry> attn;
  MatmulEntry& get_attn(int which, int64_t G) {
    auto it = attn.find({which, G});
    if (it != attn.end()) return it->second;
    using dt = dnnl::memory::data_type;
    const auto rt = DNNL_RUNTIME_DIM_VAL;
    // 3D [batch, rows, cols]; weights broadcast over the batch (GQA group).
    dnnl::memory::desc src_md({G, rt, rt}, dt::f32, {rt, rt, 1});
    dnnl::memory::desc wei_md({1, rt, rt}, dt::f32, which == 0 ? dnnl::memory::dims{rt, 1, rt} : dnnl::memory::dims{rt, rt, 1});
    dnnl::memory::desc dst_md({G, rt, rt}, dt::f32, {rt, rt, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, eng);
      grow_scratch(pd.scratchpad_desc().get_size());
      ++created;
      return attn.emplace(std::make_pair(which, G), MatmulEntry{dnnl::matmul(pd), src_md, wei_md, dst_md, pd.scratchpad_desc(), {}, {}, {}, {}}).first->second;
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "attention matmul primitive creation");
    }
  }

  MatmulEntry& get(int64_t m, int64_t k, int64_t n, int64_t ld, bool acc, Dtype wdt) {
    auto key = std::make_tuple(m, k, n, ld, acc, wdt);
    auto it = matmuls.find(key);
    if (it != matmuls.end()) return it->second;
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const auto mm = m > 0 ? m : DNNL_RUNTIME_DIM_VAL;
    const dt in_dt = wdt == Dtype::BF16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc src_md({mm, k}, in_dt, tag::ab);
    dnnl::memory::desc wei_md({k, n}, in_dt, dnnl::memory::dims{ld, 1});  // Wᵀ [k, n], row stride ld
    dnnl::memory::desc dst_md({mm, n}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (acc) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, eng);
      grow_scratch(pd.scratchpad_desc().get_size());
      ++created;
      auto [pos, ok] = matmuls.emplace(key, MatmulEntry{dnnl::matmul(pd), src_md, wei_md, dst_md, pd.scratchpad_desc(), {}, {}, {}, {}});
      return pos->second;
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, fmt::format("matmul primitive creation [{}x{}]", k, n).c_str());
    }
  }
};

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
  // Small M (decode steps): fixed-M primitive; scoring and batch-invariant passes: runtime M.
  const int64_t key_m = (!batch_invariant && m <= kInvariantMinRows) ? m : 0;
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
    if (key_m > 0) {
      if (!e.src) {
        e.src = dnnl::memory(e.src_md, im.eng, DNNL_MEMORY_NONE);
        e.wei = dnnl::memory(e.wei_md, im.eng, DNNL_MEMORY_NONE);
        e.dst = dnnl::memory(e.dst_md, im.eng, DNNL_MEMORY_NONE);
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

void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps) {
#pragma omp parallel for schedule(static) if (rows * dim > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
    for (int64_t i = 0; i < dim; ++i) ss += xr[i] * xr[i];
    const float scale = 1.0f / std::sqrt(ss / static_cast<float>(dim) + eps);
#pragma omp simd
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p,
          int64_t token_stride) {
  const int64_t n_rot = p.n_rot, half = n_rot / 2;
  if (n_rot < 2 || n_rot % 2 != 0 || n_rot > head_dim || half > 512)
    throw ArgumentError(fmt::format("rope: n_rot {} must be even, in [2, min(head_dim {}, 1024)]", n_rot, head_dim));
  if (token_stride == 0) token_stride = n_heads * head_dim;
#pragma omp parallel for schedule(static) if (n_tokens * n_heads * head_dim > 16384)
  for (int64_t t = 0; t < n_tokens; ++t) {
    // cos/sin per pair, computed in double: theta_i = pos * base^(-2i/n_rot) * freq_scale / factor_i
    float cs[512], sn[512];
    for (int64_t i = 0; i < half; ++i) {
      // scale and factor are exactly 1 without scaling: bit-identical to the unscaled angle
      const double scale = static_cast<double>(p.freq_scale) / (p.freq_factors ? static_cast<double>(p.freq_factors[i]) : 1.0);
      const double theta = static_cast<double>(pos[t]) *
                           std::pow(static_cast<double>(p.freq_base), -2.0 * static_cast<double>(i) / static_cast<double>(n_rot)) *
                           scale;
      cs[i] = static_cast<float>(std::cos(theta));
      sn[i] = static_cast<float>(std::sin(theta));
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      if (p.neox) {  // pairs (i, i + n_rot/2)
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          v[i] = a * cs[i] - b * sn[i];
          v[i + half] = a * sn[i] + b * cs[i];
        }
      } else {
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[2 * i], b = v[2 * i + 1];
          v[2 * i] = a * cs[i] - b * sn[i];
          v[2 * i + 1] = a * sn[i] + b * cs[i];
        }
      }
    }
  }
}

void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot, const int32_t* pos,
          float freq_base, int64_t token_stride) {
  RopeParams p;
  p.n_rot = n_rot;
  p.freq_base = freq_base;
  rope(x, n_tokens, n_heads, head_dim, pos, p, token_stride);
}

void add_bias(float* y, const float* bias, int64_t rows, int64_t n, int64_t row_stride) {
  if (row_stride == 0) row_stride = n;
#pragma omp parallel for schedule(static) if (rows * n > 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * row_stride;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) yr[i] += bias[i];
  }
}

void rmsnorm_heads(float* x, const float* weight, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   int64_t token_stride, float eps) {
#pragma omp parallel for schedule(static) if (n_tokens * n_heads * head_dim > 16384)
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + t * token_stride + h * head_dim;
      float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
      for (int64_t i = 0; i < head_dim; ++i) ss += v[i] * v[i];
      const float scale = 1.0f / std::sqrt(ss / static_cast<float>(head_dim) + eps);
#pragma omp simd
      for (int64_t i = 0; i < head_dim; ++i) v[i] = v[i] * scale * weight[i];
    }
}

void swiglu_fused(const float* gate_up, float* out, int64_t rows, int64_t n) {
#pragma omp parallel for schedule(static) if (rows * n > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gate_up + r * 2 * n;
    const float* u = g + n;
    float* o = out + r * n;
    for (int64_t i = 0; i < n; ++i) o[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
  }
}

void attention(const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t q_stride) {
  const AttentionSeq one{q, kv, out, n_q, past};
  attention(std::span<const AttentionSeq>(&one, 1), n_head, n_head_kv, head_dim, q_stride);
}

void attention(std::span<const AttentionSeq> seqs, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
               int64_t q_stride) {
  if (q_stride == 0) q_stride = n_head * head_dim;
  const int64_t group = n_head / n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  // Items [first[s], first[s + 1]) belong to sequence s: item w -> (query i, head h).
  thread_local std::vector<int64_t> first;
  first.assign(1, 0);
  int64_t max_ctx = 0, cost = 0;
  for (const AttentionSeq& s : seqs) {
    first.push_back(first.back() + s.n_q * n_head);
    max_ctx = std::max(max_ctx, s.past + s.n_q);
    cost += s.n_q * n_head * (s.past + s.n_q) * head_dim;
  }
  const int64_t work = first.back();
  if (work == 0) return;
  const int64_t* firsts = first.data();
  const int64_t n_seqs = static_cast<int64_t>(seqs.size());
#pragma omp parallel if (cost > 32768)
  {
    // Per-thread scores, grown once: no allocation per call in the decode loop.
    thread_local std::vector<float> scores;
    if (scores.size() < static_cast<size_t>(max_ctx)) scores.resize(static_cast<size_t>(max_ctx));
    int64_t s = 0;
#pragma omp for schedule(dynamic, 4)
    for (int64_t w = 0; w < work; ++w) {
      if (w < firsts[s] || w >= firsts[s + 1])  // items come in increasing order per thread chunk
        s = std::upper_bound(firsts, firsts + n_seqs + 1, w) - firsts - 1;
      const AttentionSeq& sq = seqs[static_cast<size_t>(s)];
      const KvView& kv = sq.kv;
      const int64_t past = sq.past;
      const int64_t i = (w - firsts[s]) / n_head, h = (w - firsts[s]) % n_head;
      const int64_t hk = h / group;
      const float* qv = sq.q + i * q_stride + h * head_dim;
      const int64_t len = past + i + 1;  // causal: positions [0, past + i]
      const float* kb = kv.k + hk * kv.head_stride;
      const float* vb = kv.v + hk * kv.head_stride;
      float mx = -INFINITY;
      for (int64_t p = 0; p < len; ++p) {
        const float* kp = kb + p * kv.pos_stride;
        float sc = 0.0f;
#pragma omp simd reduction(+ : sc)
        for (int64_t d = 0; d < head_dim; ++d) sc += qv[d] * kp[d];
        sc *= scale;
        scores[static_cast<size_t>(p)] = sc;
        mx = std::max(mx, sc);
      }
      float sum = 0.0f;
      for (int64_t p = 0; p < len; ++p) {
        const float e = std::exp(scores[static_cast<size_t>(p)] - mx);
        scores[static_cast<size_t>(p)] = e;
        sum += e;
      }
      const float inv = 1.0f / sum;
      float* o = sq.out + (i * n_head + h) * head_dim;
      for (int64_t d = 0; d < head_dim; ++d) o[d] = 0.0f;
      for (int64_t p = 0; p < len; ++p) {
        const float a = scores[static_cast<size_t>(p)] * inv;
        const float* vp = vb + p * kv.pos_stride;
#pragma omp simd
        for (int64_t d = 0; d < head_dim; ++d) o[d] += a * vp[d];
      }
    }
  }
}

void attention(Engine& engine, const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t q_stride, Buffer& scratch) {
  if (q_stride == 0) q_stride = n_head * head_dim;
  if (attention_uses_loop(n_q, head_dim)) {  // short blocks or narrow heads: call overhead would dominate
    attention(q, kv, out, n_q, past, n_head, n_head_kv, head_dim, q_stride);
    return;
  }
  // Causal blocks: queries [c0, c1) attend to positions [0, past + c1), so the
  // masked upper triangle costs ~1/(2 * blocks) of the square instead of half.
  constexpr int64_t kBlock = 128;
  if (n_q > kBlock) {
    for (int64_t c0 = 0; c0 < n_q; c0 += kBlock)
      attention(engine, q + c0 * q_stride, kv, out + c0 * n_head * head_dim, std::min(kBlock, n_q - c0), past + c0,
                n_head, n_head_kv, head_dim, q_stride, scratch);
    return;
  }
  auto& im = engine.impl();
  omp_set_num_threads(im.threads);
  const int64_t G = n_head / n_head_kv, n_ctx = past + n_q, HD = head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(HD));
  scratch.reserve(static_cast<size_t>(G * n_q * n_ctx));
  float* S = scratch.data();
  using dt = dnnl::memory::data_type;
  auto& qk = im.get_attn(0, G);
  auto& sv = im.get_attn(1, G);
  const int64_t out_stride = n_head * HD;
  try {
    for (int64_t hk = 0; hk < n_head_kv; ++hk) {
      // S[g, i, p] = q[i, hk*G + g, :] · k[p, hk, :]
      dnnl::memory qm({{G, n_q, HD}, dt::f32, {HD, q_stride, 1}}, im.eng, const_cast<float*>(q + hk * G * HD));
      dnnl::memory km({{1, HD, n_ctx}, dt::f32, {HD * n_ctx, 1, kv.pos_stride}}, im.eng,
                      const_cast<float*>(kv.k + hk * kv.head_stride));
      dnnl::memory sm({{G, n_q, n_ctx}, dt::f32, {n_q * n_ctx, n_ctx, 1}}, im.eng, S);
      dnnl::memory sp1(qk.scratch_md, im.eng, im.scratch.data());
      qk.prim.execute(im.strm, {{DNNL_ARG_SRC, qm}, {DNNL_ARG_WEIGHTS, km}, {DNNL_ARG_DST, sm}, {DNNL_ARG_SCRATCHPAD, sp1}});
      im.strm.wait();
      // causal softmax of each row i over p in [0, past + i]; masked entries -> 0
#pragma omp parallel for schedule(static)
      for (int64_t r = 0; r < G * n_q; ++r) {
        const int64_t i = r % n_q, len = past + i + 1;
        float* row = S + r * n_ctx;
        float mx = -INFINITY;
        for (int64_t p = 0; p < len; ++p) mx = std::max(mx, row[p] * scale);
        float sum = 0.0f;
        for (int64_t p = 0; p < len; ++p) {
          const float e = std::exp(row[p] * scale - mx);
          row[p] = e;
          sum += e;
        }
        const float inv = 1.0f / sum;
        for (int64_t p = 0; p < len; ++p) row[p] *= inv;
        for (int64_t p = len; p < n_ctx; ++p) row[p] = 0.0f;
      }
      // out[i, hk*G + g, :] = sum_p S[g, i, p] v[p, hk, :]
      dnnl::memory vm({{1, n_ctx, HD}, dt::f32, {n_ctx * HD, kv.pos_stride, 1}}, im.eng,
                      const_cast<float*>(kv.v + hk * kv.head_stride));
      dnnl::memory om({{G, n_q, HD}, dt::f32, {HD, out_stride, 1}}, im.eng, out + hk * G * HD);
      dnnl::memory sp2(sv.scratch_md, im.eng, im.scratch.data());
      sv.prim.execute(im.strm, {{DNNL_ARG_SRC, sm}, {DNNL_ARG_WEIGHTS, vm}, {DNNL_ARG_DST, om}, {DNNL_ARG_SCRATCHPAD, sp2}});
      im.strm.wait();
    }
  } catch (const dnnl::error& e) {
    rethrow_dnnl(e, fmt::format("attention matmul (n_q {}, n_ctx {})", n_q, n_ctx).c_str());
  }
}


}  // namespace kveval::backend
