// Decode products on kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks with int8 activations:
// see int8_dot.hpp. Each format has a scalar form (the spec) and an AVX-512
// VNNI form; the integer sums are exact in both and every f32 step is the same
// operation in the same order, so they give the same bits.
#include "backend/int8_dot.hpp"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "backend/int8_impl.hpp"
#include "backend/kernel_isa.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend {

using int8_detail::Int8Rows;
using int8_detail::reduce16;

namespace {

/// ggml's nearest_int (ggml-quants.c): round half to even for |v| < 2^22.
inline int nearest_int(float v) {
  const float f = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &f, sizeof i);
  return (i & 0x007fffff) - 0x00400000;
}

// ---- Q8_0 and Q4_0 -------------------------------------------------------
// A row's blocks back to back as in the file (Weight::ld): block b at row + b * bytes, its f16 scale
// in the first 2 bytes, then the quants (block_q8_0: 34 bytes; block_q4_0: 18).

/// Bytes of a Q8_0 block, or with `Four` of a Q4_0 block.
template <bool Four>
inline constexpr int64_t kBlockBytes = Four ? 18 : 34;

/// The block's f16 scale as f32 (exact).
inline float block_scale(const uint8_t* blk) { return util::f16_to_f32(static_cast<uint16_t>(blk[0] | (blk[1] << 8))); }

/// Q8_0's quants (int8), or with `Four` Q4_0's (element j < 16 the low nibble
/// of byte j, j + 16 its high nibble, minus 8), of the nb blocks at `row`.
template <bool Four>
float q8_0_dot_scalar(const uint8_t* row, int64_t nb, const int8_t* xq, const float* xd) {
  float acc[16] = {};
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = row + b * kBlockBytes<Four>;
    const uint8_t* qb = blk + 2;
    const int8_t* xb = xq + b * kQBlock;
    const float s = block_scale(blk) * xd[b];
    float* lane = acc + 8 * (b & 1);
    int v[kQBlock];
    for (int j = 0; j < kQBlock; ++j)
      v[j] = Four ? (j < 16 ? qb[j] & 15 : qb[j - 16] >> 4) - 8 : static_cast<int8_t>(qb[j]);
    for (int l = 0; l < 8; ++l) {
      int32_t p = 0;
      for (int k = 0; k < 4; ++k) p += v[4 * l + k] * xb[4 * l + k];
      lane[l] = std::fma(s, static_cast<float>(p), lane[l]);
    }
  }
  return reduce16(acc);
}

/// |w| as unsigned bytes against x with w's sign: vpdpbusd's u8 x s8 products
/// equal w x (x in [-127, 127], as both quantizers give).
KV_VNNI inline __m512i dot_signed(__m512i w, __m512i x) {
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w), _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), zero, x));
}

/// Q4_0's 16 bytes at p as the block's 32 nibbles in element order (u8).
KV_VNNI inline __m256i nibbles(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m4 = _mm_set1_epi8(15);
  return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_and_si128(v, m4)), _mm_and_si128(_mm_srli_epi16(v, 4), m4), 1);
}

/// Block products of 8 lanes per block: Q8_0 (signed quants) or Q4_0 (nibble - 8: the
/// nibbles' u8 x s8 sums minus 8 times the activations' sums, both from vpdpbusd).
template <bool Four>
KV_VNNI inline __m512i block_dot(__m512i w, __m512i x) {
  if constexpr (Four) {
    const __m512i zero = _mm512_setzero_si512();
    return _mm512_sub_epi32(_mm512_dpbusd_epi32(zero, w, x), _mm512_dpbusd_epi32(zero, _mm512_set1_epi8(8), x));
  } else {
    return dot_signed(w, x);
  }
}

/// The quants of the block at blk as 32 bytes (Q4_0: the nibbles).
template <bool Four>
KV_VNNI inline __m256i block_bytes(const uint8_t* blk) {
  if constexpr (Four) return nibbles(blk + 2);
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
}

/// The block's f16 scale as f32 in one instruction (vcvtph2ps: exact, as block_scale).
KV_VNNI inline float block_scale_vnni(const uint8_t* blk) { return _cvtsh_ss(static_cast<uint16_t>(blk[0] | (blk[1] << 8))); }

/// Bytes ahead of the current block pair that the Q8_0/Q4_0 VNNI form prefetches in each row's
/// stream into L1, and further ahead into L2 (Zen 4, Q8_0 Llama-3.2-1B shape, 2 threads, tg64
/// alternating: 20.5 / 22.2 / 23.5 tok/s without, 32.1 / 22.2 / 31.0 with; the machine's speed drifted).
constexpr int64_t kQAheadBytes = 2048, kQAheadL2Bytes = 16384;

/// R consecutive rows of W (row i's nb blocks at q0 + i ld) against one quantized row: out[i]. Each
/// row's steps are those of one row alone (q8_0_dot_scalar's); the R rows share each activation load,
/// each row a stream of its own, prefetched ahead (the lines of a pair of blocks every step).
template <bool Four, int R>
KV_VNNI void q8_0_tile_vnni(const uint8_t* q0, int64_t ld, int64_t nb, const int8_t* xq, const float* xd,
                            float* out) {
  constexpr int64_t bytes = kBlockBytes<Four>;
  __m512 acc[R];
  for (int i = 0; i < R; ++i) acc[i] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    for (int i = 0; i < R; ++i) {  // as integers: near the end of W these lie past it (a prefetch never faults)
      const auto p = reinterpret_cast<uintptr_t>(q0) + static_cast<uintptr_t>(i * ld + b * bytes);
      for (int64_t l = 0; l < 2 * bytes; l += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(p + static_cast<uintptr_t>(kQAheadBytes + l)), _MM_HINT_T0);
        _mm_prefetch(reinterpret_cast<const char*>(p + static_cast<uintptr_t>(kQAheadL2Bytes + l)), _MM_HINT_T1);
      }
    }
    const __m512i x = _mm512_loadu_si512(xq + b * kQBlock);
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = q0 + i * ld + b * bytes;
      const __m512i w = _mm512_inserti64x4(_mm512_castsi256_si512(block_bytes<Four>(blk)), block_bytes<Four>(blk + bytes), 1);
      const __m512i dp = block_dot<Four>(w, x);
      const __m512 s = _mm512_insertf32x8(_mm512_set1_ps(block_scale_vnni(blk) * xd[b]),
                                          _mm256_set1_ps(block_scale_vnni(blk + bytes) * xd[b + 1]), 1);
      acc[i] = _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(dp), acc[i]);
    }
  }
  if (b < nb) {  // the last, even block: lanes 0-7 only
    const __m512i x = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kQBlock)));
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = q0 + i * ld + b * bytes;
      const __m512i w = _mm512_zextsi256_si512(block_bytes<Four>(blk));
      const __m512 s = _mm512_set1_ps(block_scale_vnni(blk) * xd[b]);
      acc[i] = _mm512_mask3_fmadd_ps(s, _mm512_cvtepi32_ps(block_dot<Four>(w, x)), acc[i], 0x00FF);
    }
  }
  for (int i = 0; i < R; ++i) {
    alignas(64) float v[16];
    _mm512_store_ps(v, acc[i]);
    out[i] = reduce16(v);
  }
}

// ---- the product ---------------------------------------------------------

/// Rows of W the Q8_0/Q4_0 VNNI form takes at a time.
constexpr int64_t kQTileRows = 4;

/// Rows [n0, n1) of y (+)= the Q8_0 / Q4_0 products of W's rows with the m quantized rows: the VNNI
/// form kQTileRows rows at a time (the rest one by one), the scalar form a row at a time.
void q8_0_rows(const Weight& w, const Int8Rows& xr, int64_t m, int64_t n0, int64_t n1, bool vnni, float* y,
               bool accumulate) {
  const int64_t N = w.n_out(), K = w.n_in(), nb = K / kQBlock, ld = w.ld();
  const auto* raw = static_cast<const uint8_t*>(w.raw());
  const bool four = w.dtype() == Dtype::Q4_0;
  float v[kQTileRows];
  for (int64_t n = n0; n < n1;) {
    const int rows = vnni && n + kQTileRows <= n1 ? kQTileRows : 1;
    const uint8_t* q = raw + n * ld;
    for (int64_t r = 0; r < m; ++r) {
      const int8_t* xq = xr.qs + r * K;
      const float* xd = xr.d + r * nb;
      if (!vnni) v[0] = four ? q8_0_dot_scalar<true>(q, nb, xq, xd) : q8_0_dot_scalar<false>(q, nb, xq, xd);
      else if (rows == kQTileRows)
        four ? q8_0_tile_vnni<true, kQTileRows>(q, ld, nb, xq, xd, v) : q8_0_tile_vnni<false, kQTileRows>(q, ld, nb, xq, xd, v);
      else
        four ? q8_0_tile_vnni<true, 1>(q, ld, nb, xq, xd, v) : q8_0_tile_vnni<false, 1>(q, ld, nb, xq, xd, v);
      for (int k = 0; k < rows; ++k) y[r * N + n + k] = accumulate ? y[r * N + n + k] + v[k] : v[k];
    }
    n += rows;
  }
}

constexpr int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace

bool int8_kernel(Dtype d) { return int8_matmul_dtype(d); }

bool int8_has_vnni() {
  static const bool v = kernel_isa() == KernelIsa::Avx512 && __builtin_cpu_supports("avx512vnni") &&
                        onednn_isa_includes(dnnl::cpu_isa::avx512_core_vnni);
  return v;
}

int64_t int8_scratch_floats(int64_t m, int64_t n_in) {
  return (round64(4 * m * (n_in / kQBlock)) + round64(2 * m * (n_in / kKBlock) * 24) + round64(m * n_in) + round64(m * n_in * 3 / 2)) / 4;
}

Int8Rows int8_detail::carve(float* scratch, int64_t m, int64_t K) {
  auto* base = reinterpret_cast<uint8_t*>(scratch);
  const int64_t d_bytes = round64(4 * m * (K / kQBlock)), bs_bytes = round64(2 * m * (K / kKBlock) * 24);
  const int64_t nbs = m * (K / kKBlock) * 16;
  auto* bs = reinterpret_cast<int16_t*>(base + d_bytes);
  auto* qs = reinterpret_cast<int8_t*>(base + d_bytes + bs_bytes);
  return {qs, scratch, bs, bs + nbs, qs + round64(m * K)};
}

void quantize_row_q8_K(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums) {
  if (n % kKBlock != 0) throw ArgumentError(fmt::format("quantize_row_q8_K: {} values (a multiple of {} expected)", n, kKBlock));
  for (int64_t b = 0; b < n / kKBlock; ++b) {
    const float* xb = x + b * kKBlock;
    int8_t* q = qs + b * kKBlock;
    int16_t* bs = bsums + b * 16;
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < kKBlock; ++j) {
      const float ax = std::fabs(xb[j]);
      if (ax > amax) {
        amax = ax;
        max = xb[j];
      }
    }
    const float iscale = amax > 0.0f ? -127.0f / max : 0.0f;
    if (iscale == 0.0f || !std::isfinite(iscale)) {
      d[b] = 0.0f;
      std::memset(q, 0, kKBlock);
      std::memset(bs, 0, 16 * sizeof(int16_t));
      continue;
    }
    for (int j = 0; j < kKBlock; ++j) q[j] = static_cast<int8_t>(std::min(127, nearest_int(iscale * xb[j])));
    for (int g = 0; g < 16; ++g) {
      int s = 0;
      for (int l = 0; l < 16; ++l) s += q[16 * g + l];
      bs[g] = static_cast<int16_t>(s);
    }
    d[b] = 1.0f / iscale;
  }
}

void quantize_row_q8_0(const float* x, int64_t n, int8_t* qs, float* d) {
  if (n % kQBlock != 0) throw ArgumentError(fmt::format("quantize_row_q8_0: {} values (a multiple of {} expected)", n, kQBlock));
  for (int64_t b = 0; b < n / kQBlock; ++b) {
    const float* xb = x + b * kQBlock;
    int8_t* q = qs + b * kQBlock;
    float amax = 0.0f;
    for (int j = 0; j < kQBlock; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float dd = amax / 127.0f;
    float dh = util::f16_to_f32(util::f32_to_f16(dd));
    if (std::isinf(dh)) dh = dd;  // beyond f16's range
    if (!(dh != 0.0f)) {          // 0 (or NaN): the block contributes nothing
      d[b] = 0.0f;
      std::memset(q, 0, kQBlock);
      continue;
    }
    const float id = 1.0f / dd;
    for (int j = 0; j < kQBlock; ++j) {
      const float v = std::round(xb[j] * id);
      q[j] = static_cast<int8_t>(v >= -127.0f && v <= 127.0f ? v : 0.0f);  // always within for finite x
    }
    d[b] = dh;
  }
}

void int8_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch,
                 bool vnni) {
  if (!int8_kernel(w.dtype()))
    throw ArgumentError(fmt::format("int8_matmul: a {} weight (Q8_0, Q4_0, Q4_K, Q5_K or Q6_K only)", to_string(w.dtype())));
  if (m < 1 || m > kInt8MaxRows) throw ArgumentError(fmt::format("int8_matmul: {} rows outside [1, {}]", m, kInt8MaxRows));
  if (vnni && !int8_has_vnni()) throw ArgumentError("int8_matmul: the VNNI form asked for on a CPU without it");
  if (scratch == nullptr) throw ArgumentError("int8_matmul: no scratch");
  const int64_t N = w.n_out(), K = w.n_in();
  const Int8Rows xr = int8_detail::carve(scratch, m, K);
  const bool kq = is_kquant(w.dtype());
  for (int64_t r = 0; r < m; ++r) {
    if (kq)
      quantize_row_q8_K(x + r * K, K, xr.qs + r * K, xr.d + r * (K / kKBlock), xr.bsums + r * (K / kKBlock) * 16);
    else
      quantize_row_q8_0(x + r * K, K, xr.qs + r * K, xr.d + r * (K / kQBlock));
  }
  if (kq) int8_detail::prepare_kquant(xr, m, K, w.dtype());
  const int t = m * N * K < kDecodeParallelMacs ? 1 : std::max(1, threads);
  // Each thread a contiguous range of whole tiles of 4 rows (the K-quant VNNI kernels' tile).
  const int64_t tiles = (N + 3) / 4;
#pragma omp parallel num_threads(t)
  {
    const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
    const int64_t n0 = std::min(N, 4 * (tiles * id / nt)), n1 = std::min(N, 4 * (tiles * (id + 1) / nt));
    if (kq)
      int8_detail::kquant_rows(w, xr, m, n0, n1, vnni, y, accumulate);
    else
      q8_0_rows(w, xr, m, n0, n1, vnni, y, accumulate);
  }
}

}  // namespace kveval::backend
