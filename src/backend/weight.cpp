// Weight storage, aligned buffers, bf16 conversion and CPU feature queries.
#include "backend/backend.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/kernel_isa.hpp"
#include "util/bf16.hpp"
#include "util/error.hpp"

namespace kveval::backend {

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::BF16: return "bf16";
    case Dtype::Q8_0: return "q8_0";
    case Dtype::Q4_0: return "q4_0";
    case Dtype::F16: return "f16";
    case Dtype::Q4_1: return "q4_1";
    case Dtype::Q5_0: return "q5_0";
    case Dtype::Q5_1: return "q5_1";
    case Dtype::Q2_K: return "q2_k";
    case Dtype::Q3_K: return "q3_k";
    case Dtype::Q4_K: return "q4_k";
    case Dtype::Q5_K: return "q5_k";
    case Dtype::Q6_K: return "q6_k";
    default: return "f32";
  }
}

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

namespace {

/// What free_floats needs, kept in the 64 bytes before each block alloc_floats returns.
struct FloatsHeader {
  void* base;   ///< what to free: malloc's pointer, or the start of the mapping
  size_t len;   ///< the mapping's length; 0 for a malloc'd block
};
constexpr size_t kHeaderBytes = 64, kHugePage = size_t(2) << 20, kSmallPage = size_t(4) << 10;

FloatsHeader* header_of(void* p) { return reinterpret_cast<FloatsHeader*>(static_cast<std::byte*>(p) - kHeaderBytes); }

}  // namespace

float* alloc_floats(size_t n) {
  if (n > (SIZE_MAX - 2 * kHugePage) / sizeof(float)) throw std::bad_alloc();
  const size_t bytes = std::max<size_t>(64, (n * sizeof(float) + 63) / 64 * 64);
  if (bytes < kHugePage) {
    void* base = nullptr;
    if (::posix_memalign(&base, 64, bytes + kHeaderBytes) != 0) throw std::bad_alloc();
    void* p = static_cast<std::byte*>(base) + kHeaderBytes;
    *header_of(p) = {base, 0};
    return static_cast<float*>(p);
  }
  // A mapping of its own (never malloc's heap, whose reused ranges would keep the advice below):
  // one 4 KiB page for the header, then the block at the next 2 MiB boundary.
  const size_t len = bytes + kHugePage + kSmallPage;
  void* base = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) throw std::bad_alloc();
  const auto b = reinterpret_cast<uintptr_t>(base);
  void* p = reinterpret_cast<void*>((b + kSmallPage + kHugePage - 1) / kHugePage * kHugePage);
  *header_of(p) = {base, len};
  // Huge pages only for the block's whole 2 MiB pages: one under its tail would make up to
  // 2 MiB resident that nobody asked for (advice only: failure is harmless).
  ::madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
  return static_cast<float*>(p);
}

void free_floats(float* p) {
  if (!p) return;
  const FloatsHeader h = *header_of(p);
  if (h.len == 0) std::free(h.base);
  else ::munmap(h.base, h.len);
}

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

namespace {

/// Bytes of one row of file-block dtype `dtype`; throws ArgumentError when n_in is not a whole number of blocks.
int64_t file_block_row_bytes(Dtype dtype, int64_t n_out, int64_t n_in) {
  const int64_t be = file_block_elements(dtype);
  if (n_in % be != 0)
    throw ArgumentError(
        fmt::format("Weight: {} needs n_in divisible by {} (shape [{}, {}])", to_string(dtype), be, n_out, n_in));
  return n_in / be * file_block_bytes(dtype);
}

}  // namespace

Weight Weight::view_file_blocks(int64_t n_out, int64_t n_in, Dtype dtype, const void* rows,
                                std::shared_ptr<const void> owner) {
  if (!is_file_blocks(dtype))
    throw ArgumentError(fmt::format("Weight::view_file_blocks of a {} matrix", to_string(dtype)));
  if (n_out <= 0 || n_in <= 0 || !rows) throw ArgumentError(fmt::format("Weight: bad shape [{}, {}]", n_out, n_in));
  Weight w;
  w.n_out_ = n_out, w.n_in_ = n_in, w.dtype_ = dtype;
  w.ld_ = file_block_row_bytes(dtype, n_out, n_in);
  w.view_ = rows;
  w.owner_ = std::move(owner);
  return w;
}

Weight::Weight(int64_t n_out, int64_t n_in, Dtype dtype) : n_out_(n_out), n_in_(n_in), dtype_(dtype) {
  if (n_out <= 0 || n_in <= 0) throw ArgumentError(fmt::format("Weight: bad shape [{}, {}]", n_out, n_in));
  if (is_file_blocks(dtype)) {  // the file's blocks, rows back to back
    ld_ = file_block_row_bytes(dtype, n_out, n_in);
    data_.reset(alloc_floats((static_cast<size_t>(n_out * ld_) + 3) / 4));
    return;
  }
  if (dtype == Dtype::BF16 && kernel_has_bf16_dot()) {  // oneDNN's BA16a64b2a (bf16_panels), padding zero
    panels_ = true;
    ld_ = (n_in + 31) / 32 * 32 * 64;
    const size_t elems = static_cast<size_t>((n_out + 63) / 64 * ld_);
    data_.reset(alloc_floats((elems + 1) / 2));
    std::memset(data_.get(), 0, elems * 2);
    return;
  }
  const int64_t esize = dtype == Dtype::BF16 ? 2 : 4;
  ld_ = (n_out * esize) % 4096 == 0 ? n_out + 64 / esize : n_out;
  data_.reset(alloc_floats(static_cast<size_t>((ld_ * n_in * esize + 3) / 4)));
  if (ld_ != n_out) {  // keep the padding columns defined (zero bits in either dtype)
    auto* b = reinterpret_cast<std::byte*>(data_.get());
    for (int64_t k = 0; k < n_in; ++k)
      std::memset(b + (k * ld_ + n_out) * esize, 0, static_cast<size_t>((ld_ - n_out) * esize));
  }
}

void Weight::set_rows_file_blocks(int64_t row0, const void* blocks, int64_t rows) {
  if (!is_file_blocks(dtype_) || view_)
    throw ArgumentError(fmt::format("Weight::set_rows_file_blocks on a {}{} matrix", to_string(dtype_),
                                    view_ ? " view" : ""));
  if (row0 < 0 || rows < 0 || row0 + rows > n_out_)
    throw ArgumentError(
        fmt::format("Weight::set_rows_file_blocks: rows [{}, {}) outside [0, {})", row0, row0 + rows, n_out_));
  std::memcpy(reinterpret_cast<std::byte*>(data_.get()) + row0 * ld_, blocks, static_cast<size_t>(rows * ld_));
}

void Weight::set_rows(int64_t row0, const float* src, int64_t rows) {
  if (is_file_blocks(dtype_))
    throw ArgumentError(fmt::format("Weight::set_rows on a {} matrix (use set_rows_file_blocks)", to_string(dtype_)));
  if (row0 < 0 || rows < 0 || row0 + rows > n_out_)
    throw ArgumentError(fmt::format("Weight::set_rows: rows [{}, {}) outside [0, {})", row0, row0 + rows, n_out_));
  // Blocked transpose: src [rows, n_in] -> data [n_in, n_out] columns [row0, row0 + rows).
  constexpr int64_t B = 64;
  if (panels_) {  // pairs of k are adjacent: a row of W is written in order, 128 elements apart per pair
    auto* dst = reinterpret_cast<uint16_t*>(data_.get());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < n_in_; ++k) dst[bf16_index(k, row0 + r)] = f32_to_bf16(src[r * n_in_ + k]);
    return;
  }
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
  if (is_file_blocks(dtype_))
    throw ArgumentError(fmt::format("Weight::set_rows_bf16 on a {} matrix (use set_rows_file_blocks)", to_string(dtype_)));
  if (row0 < 0 || rows < 0 || row0 + rows > n_out_)
    throw ArgumentError(fmt::format("Weight::set_rows_bf16: rows [{}, {}) outside [0, {})", row0, row0 + rows, n_out_));
  if (panels_) {
    auto* dst = reinterpret_cast<uint16_t*>(data_.get());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < n_in_; ++k) dst[bf16_index(k, row0 + r)] = src[r * n_in_ + k];
    return;
  }
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

}  // namespace kveval::backend
