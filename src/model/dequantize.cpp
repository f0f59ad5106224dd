// Tensor conversion at load: see dequantize.hpp. The per-format block codecs
// are in quant/; this file dispatches on the type table, splits the work into
// chunks of whole blocks for OpenMP threads, and scans each converted chunk
// for non-finite values while it is still in cache (no second pass over memory).
#include "model/dequantize.hpp"

#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "model/quant/quant.hpp"
#include "util/bf16.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

/// The type's table row; ArgumentError for a type kveval does not read.
const gguf::TypeInfo& lookup(gguf::TensorType type) {
  const gguf::TypeInfo* ti = gguf::type_info(static_cast<uint32_t>(type));
  if (!ti || !ti->supported())
    throw ArgumentError(fmt::format("tensor type {} ({}) is not supported", gguf::type_name(type),
                                    static_cast<uint32_t>(type)));
  return *ti;
}

/// Output elements per chunk: 64 KiB of float32, a multiple of every block size.
constexpr uint64_t kChunkElements = 16384;

/// True when every value of p[0, n) is finite (exponent bits not all ones).
bool all_finite(const float* p, uint64_t n) {
  uint32_t bad = 0;
#pragma omp simd reduction(| : bad)
  for (uint64_t i = 0; i < n; ++i) bad |= static_cast<uint32_t>((~std::bit_cast<uint32_t>(p[i]) & 0x7f800000u) == 0);
  return bad == 0;
}

int thread_count(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

/// Chunks below which a conversion runs on one thread: waking the OpenMP team
/// costs more than converting fewer than 256 Ki elements (1 MiB of float32),
/// and much more when another process holds the cores.
constexpr int64_t kMinParallelChunks = 16;

/// Runs f(first_block, n_blocks) over [0, n_blocks) in chunks of `per_chunk`
/// blocks, in parallel from kMinParallelChunks chunks up; f returns the first
/// flagged element of its chunk (relative to block 0) or UINT64_MAX; returns the minimum.
template <class F>
uint64_t for_chunks(uint64_t n_blocks, uint64_t per_chunk, int threads, F&& f) {
  const int64_t n_chunks = static_cast<int64_t>((n_blocks + per_chunk - 1) / per_chunk);
  uint64_t first = std::numeric_limits<uint64_t>::max();
#pragma omp parallel for num_threads(thread_count(threads)) schedule(static) reduction(min : first) \
    if (n_chunks >= kMinParallelChunks)
  for (int64_t k = 0; k < n_chunks; ++k) {
    const uint64_t b0 = static_cast<uint64_t>(k) * per_chunk;
    first = std::min(first, f(b0, std::min(per_chunk, n_blocks - b0)));
  }
  return first;
}

}  // namespace

const char* dtype_name(DType d) {
  switch (d) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
  }
  return "?";
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
  }
  return 0;
}

uint64_t tensor_bytes(gguf::TensorType type, uint64_t n_elements) {
  const gguf::TypeInfo* ti = &lookup(type);
  if (n_elements % ti->block_size != 0)
    throw ArgumentError(fmt::format("{} elements of {} are not a multiple of its block size {}", n_elements, ti->name,
                                    ti->block_size));
  return n_elements / ti->block_size * ti->type_size;
}

uint64_t dequantize(gguf::TensorType type, const std::byte* src, float* dst, uint64_t n_elements, int threads,
                    bool check_finite) {
  const gguf::TypeInfo* ti = &lookup(type);
  const uint64_t bs = ti->block_size, ts = ti->type_size;
  const uint64_t n_blocks = tensor_bytes(type, n_elements) / ts;
  return for_chunks(n_blocks, std::max<uint64_t>(1, kChunkElements / bs), threads,
                    [&](uint64_t b0, uint64_t nb) -> uint64_t {
                      float* y = dst + b0 * bs;
                      ti->dequantize(src + b0 * ts, y, static_cast<int64_t>(nb));
                      if (!check_finite || all_finite(y, nb * bs)) return std::numeric_limits<uint64_t>::max();
                      uint64_t i = 0;
                      while (std::isfinite(y[i])) ++i;
                      return b0 * bs + i;
                    });
}

namespace {
/// Throws the FormatError of a weight `v` (NaN or ±Inf) at flat `element` of tensor `t`.
[[noreturn]] void not_finite(const gguf::File& file, const gguf::TensorInfo& t, uint64_t element, float v) {
  const uint64_t row_len = t.row_length();
  throw FormatError(fmt::format("{}: tensor '{}' holds {} at element {} (row {}, column {}); the weights of a model "
                                "must be finite (corrupt or badly converted file)",
                                file.path(), t.name, std::isnan(v) ? "NaN" : (v > 0 ? "+Inf" : "-Inf"), element,
                                element / row_len, element % row_len));
}
}  // namespace

void dequantize_rows(const gguf::File& file, const gguf::TensorInfo& t, uint64_t row0, uint64_t rows, DType dtype,
                     void* dst, const ConvertOptions& opts) {
  const uint64_t n_rows = t.n_rows();
  if (row0 > n_rows || rows > n_rows - row0)
    throw ArgumentError(fmt::format("dequantize_rows: rows [{}, {}) outside tensor '{}' of {} rows", row0, row0 + rows,
                                    t.name, n_rows));
  const uint64_t row_len = t.row_length();
  const std::byte* src = t.data + row0 * t.row_bytes();
  uint64_t bad = std::numeric_limits<uint64_t>::max();
  float bad_value = 0;
  switch (dtype) {
    case DType::F32: {
      auto* out = static_cast<float*>(dst);
      bad = dequantize(t.type, src, out, rows * row_len, opts.threads, opts.check_finite);
      if (bad != std::numeric_limits<uint64_t>::max()) bad_value = out[bad];
      break;
    }
    case DType::BF16: {
      // Whole blocks per chunk through an F32 buffer in cache, then rounded.
      const gguf::TypeInfo& ti = lookup(t.type);
      const uint64_t bs = ti.block_size, ts = ti.type_size;
      const uint64_t per_chunk = std::max<uint64_t>(1, kChunkElements / bs);
      auto* out = static_cast<uint16_t*>(dst);
      const uint64_t n_blocks = tensor_bytes(t.type, rows * row_len) / ts;
      bad = for_chunks(n_blocks, per_chunk, opts.threads, [&](uint64_t b0, uint64_t nb) -> uint64_t {
        thread_local std::vector<float> buf;
        buf.resize(per_chunk * bs);
        const uint64_t n = nb * bs;
        ti.dequantize(src + b0 * ts, buf.data(), static_cast<int64_t>(nb));
        uint16_t* y = out + b0 * bs;
        util::f32_to_bf16_n(buf.data(), y, n);
        if (!opts.check_finite) return std::numeric_limits<uint64_t>::max();
        uint32_t any = 0;
#pragma omp simd reduction(| : any)
        for (uint64_t i = 0; i < n; ++i) any |= static_cast<uint32_t>((~y[i] & 0x7f80u) == 0);
        if (any == 0) return std::numeric_limits<uint64_t>::max();
        uint64_t i = 0;
        while ((~y[i] & 0x7f80u) != 0) ++i;
        return b0 * bs + i;
      });
      if (bad != std::numeric_limits<uint64_t>::max()) bad_value = util::bf16_to_f32(out[bad]);
      break;
    }
  }
  if (bad == std::numeric_limits<uint64_t>::max()) return;
  not_finite(file, t, row0 * row_len + bad, bad_value);
}

bool block_scales_finite(gguf::TensorType type, const std::byte* src, uint64_t n_blocks) {
  using T = gguf::TensorType;
  int a = -1, b = -1;  // byte offsets of the f16 scale fields in a block
  switch (type) {
    case T::Q2_K: a = 80, b = 82; break;
    case T::Q3_K: a = 108; break;
    case T::Q4_K: case T::Q5_K: case T::Q4_1: case T::Q5_1: a = 0, b = 2; break;
    case T::Q6_K: a = 208; break;
    case T::Q5_0: case T::Q8_0: case T::Q4_0: a = 0; break;
    default: return false;
  }
  const uint64_t ts = lookup(type).type_size;
  const auto field_bad = [&](uint64_t i, int off) {
    uint16_t h;
    std::memcpy(&h, src + i * ts + off, 2);
    return static_cast<uint32_t>((h & 0x7c00u) == 0x7c00u);  // f16 exponent all ones: Inf or NaN
  };
  uint32_t bad = 0;
  for (uint64_t i = 0; i < n_blocks; ++i) bad |= field_bad(i, a) | (b >= 0 ? field_bad(i, b) : 0u);
  return bad == 0;
}

void quantize(gguf::TensorType type, const float* src, std::byte* dst, uint64_t n_elements, int threads) {
  const gguf::TypeInfo* ti = &lookup(type);
  const uint64_t bs = ti->block_size, ts = ti->type_size;
  const uint64_t n_blocks = tensor_bytes(type, n_elements) / ts;
  for_chunks(n_blocks, std::max<uint64_t>(1, kChunkElements / bs), threads, [&](uint64_t b0, uint64_t nb) {
    ti->quantize(src + b0 * bs, dst + b0 * ts, static_cast<int64_t>(nb));
    return std::numeric_limits<uint64_t>::max();
  });
}

}  // namespace kveval
