// Int8 decode products on Q4_K, Q5_K and Q6_K super-blocks (int8_dot.hpp gives
// the operation order). Both forms build the same 16 int32 lanes per
// super-block (exact) and do the same f32 steps in the same order, so they
// give the same bits: the scalar form walks the elements and adds each to its
// lane (q4k_lane, q6k_lane); the AVX-512 VNNI form gets the lanes from
// vpdpbusd on 64-element chunks, vpackssdw of two chunks' sums (each fits int16)
// and vpdpwssd with the sub-blocks' scales. With one activation row (a decode
// step) it walks its weight rows one after another, one sequential stream, 4
// super-blocks at a time (their scales, d and mins decoded together); with more,
// tiles of 4 weight rows share every activation load and each weight super-block
// is dotted with every activation row.
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backend/int8_dot.hpp"
#include "backend/int8_impl.hpp"
#include "util/half.hpp"

// GCC 12's AVX-512 conversion intrinsics warn about their own undefined
// pass-through operand (false -Wmaybe-uninitialized/-Wuninitialized in avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend::int8_detail {

namespace {

constexpr int64_t kQ4KBytes = 144, kQ5KBytes = 176, kQ6KBytes = 210;
/// Bytes per activation super-block in the Q6_K layout of qs_k4: 256 quants, then 64 int16 bases.
constexpr int64_t kQ6XBytes = kKBlock + 128;
/// Tiles ahead of the current one that the VNNI form prefetches: a thread's rows are one
/// contiguous byte range, read a tile (kTile rows) at a time, so it prefetches the bytes
/// kAheadTiles tiles further on in that range, a tile's share per super-block step.
constexpr int64_t kAheadTiles = 2;
/// Weight rows per tile of the VNNI form (two or more activation rows).
constexpr int kTile = 4;
/// Bytes ahead in its row range that the VNNI form with one activation row prefetches into L1,
/// and further ahead into L2 (a DRAM miss takes longer than 2 KiB of the stream: Zen 4, 1 thread,
/// the L2 prefetch raised Q4_K_M tg64 from 26.2 to 29.4 tok/s; see docs/design/decode-kernels.md).
constexpr int64_t kAheadBytes = 2048, kAheadL2Bytes = 16384;

/// The little-endian f16 at p as f32 (exact).
inline float load_f16(const uint8_t* p) { return util::f16_to_f32(static_cast<uint16_t>(p[0] | (p[1] << 8))); }

/// A Q4_K/Q5_K super-block's 12 scale bytes decoded with ggml's kmask trick (ggml_vec_dot_q4_K_q8_K):
/// out[0..7] the sub-blocks' 6-bit scales, out[8..15] their 6-bit mins (get_scale_min_k4's values).
inline void q4k_scales_mins(const uint8_t* s12, uint8_t* out) {
  constexpr uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
  uint32_t u[4];
  std::memcpy(u, s12, 12);
  u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
  const uint32_t mins_lo = u[1] & k1;
  u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
  u[2] = mins_lo;
  u[0] &= k1;
  std::memcpy(out, u, 16);
}

/// The int32 lane (0-15) that element e of a Q4_K/Q5_K super-block adds to: chunk byte p of
/// prepare_k4's layout (s: low or high nibble) feeds vpdpbusd lane p / 4; vpackssdw puts chunk
/// s's lane i at word 8 (i / 4) + 4 s + i % 4; vpdpwssd adds words 2 j and 2 j + 1 into lane j.
constexpr int q4k_lane(int e) {
  const int r = e % 128, s = (r / 32) % 2, p = r % 32 + 32 * (r / 64);
  return 4 * (p / 16) + 2 * s + (p % 16) / 8;
}

/// As q4k_lane for Q6_K, whose chunks are elements 128 h + 64 s + [0, 64) in order.
constexpr int q6k_lane(int e) {
  const int r = e % 128, s = r / 64, p = r % 64;
  return 4 * (p / 16) + 2 * s + (p % 16) / 8;
}

// ---- scalar form ----------------------------------------------------------

/// One Q4_K (Q5_K with `Five`) super-block into the lanes: acc_j = fma(d dx, I_j, acc_j) and
/// accm_i = fma(-(dmin dx), M_i, accm_i), M_i = m_{2i} B_{2i} + m_{2i+1} B_{2i+1} (B: bsums32).
template <bool Five>
void q4k_block_scalar(const uint8_t* blk, const int8_t* xq, const int16_t* b32, float dx, float* acc, float* accm) {
  uint8_t sm[16];
  q4k_scales_mins(blk + 4, sm);
  const uint8_t* qs = blk + (Five ? 48 : 16);
  const uint8_t* qh = blk + 16;
  int32_t lane[16] = {};
  for (int e = 0; e < 256; ++e) {  // ggml: element e in qs[32 (e / 64) + e % 32], high nibble when (e / 32) odd
    int q = (qs[32 * (e / 64) + e % 32] >> (4 * ((e / 32) % 2))) & 15;
    if constexpr (Five) q |= ((qh[e % 32] >> (e / 32)) & 1) << 4;
    lane[q4k_lane(e)] += sm[e / 32] * q * xq[e];
  }
  const float s = load_f16(blk) * dx, sm_neg = -(load_f16(blk + 2) * dx);
  for (int j = 0; j < 16; ++j) acc[j] = std::fma(s, static_cast<float>(lane[j]), acc[j]);
  for (int i = 0; i < 4; ++i) {
    const int32_t mi = sm[8 + 2 * i] * b32[2 * i] + sm[9 + 2 * i] * b32[2 * i + 1];
    accm[i] = std::fma(sm_neg, static_cast<float>(mi), accm[i]);
  }
}

/// One Q6_K super-block into the lanes (I_j of the centred quants q - 32): acc_j = fma(d dx, I_j, acc_j).
void q6k_block_scalar(const uint8_t* blk, const int8_t* xq, float dx, float* acc) {
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  int32_t lane[16] = {};
  for (int e = 0; e < 256; ++e) {  // ggml's dequantize_row_q6_K: quarter k of each 128-element half
    const int h = e / 128, l = e % 32, k = (e % 128) / 32;
    const int lo = (blk[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 15, hi = (blk[128 + 32 * h + l] >> (2 * k)) & 3;
    lane[q6k_lane(e)] += sc[e / 16] * ((lo | hi << 4) - 32) * xq[e];
  }
  const float s = load_f16(blk + 208) * dx;
  for (int j = 0; j < 16; ++j) acc[j] = std::fma(s, static_cast<float>(lane[j]), acc[j]);
}

/// W row `row` (nb super-blocks) against the m quantized rows: out[r].
void row_scalar(Dtype dt, const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t K, int64_t m, float* out) {
  const int64_t bytes = dt == Dtype::Q4_K ? kQ4KBytes : dt == Dtype::Q5_K ? kQ5KBytes : kQ6KBytes;
  for (int64_t r = 0; r < m; ++r) {
    float acc[16] = {}, accm[4] = {};
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + b * bytes;
      const int64_t xb = r * (K / kKBlock) + b;
      const int8_t* xq = xr.qs + xb * kKBlock;
      if (dt == Dtype::Q4_K) q4k_block_scalar<false>(blk, xq, xr.bsums32 + xb * 8, xr.d[xb], acc, accm);
      else if (dt == Dtype::Q5_K) q4k_block_scalar<true>(blk, xq, xr.bsums32 + xb * 8, xr.d[xb], acc, accm);
      else q6k_block_scalar(blk, xq, xr.d[xb], acc);
    }
    out[r] = reduce16(acc) + ((accm[0] + accm[2]) + (accm[1] + accm[3]));
  }
}

// ---- VNNI form -----------------------------------------------------------

/// reduce16 of v's lanes then + ((m_0 + m_2) + (m_1 + m_3)).
KV_VNNI inline float finish(__m512 v, __m128 mv) {
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 t = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 u = _mm_add_ps(t, _mm_movehl_ps(t, t));
  const __m128 w = _mm_add_ps(mv, _mm_movehl_ps(mv, mv));
  const float sum = _mm_cvtss_f32(_mm_add_ss(u, _mm_shuffle_ps(u, u, 1)));
  return sum + _mm_cvtss_f32(_mm_add_ss(w, _mm_shuffle_ps(w, w, 1)));
}

/// Permutation indices, built at compile time. scale[six][h]: vpdpwssd word index -> source word
/// of the scale vectors of chunk pair h: lane j takes the scale of sub-block (Q4_K) 4 h + (j % 4) / 2
/// + 2 (j / 8), of group (Q6_K) 8 h + 4 ((j % 4) / 2) + j / 4. q4k_words[k][h]: vpermb indices (odd
/// bytes masked to zero) that turn q4k_scales_mins_x4's bytes into those scale words of its block k;
/// q4k_words[4][0]: into the 4 blocks' mins as words, block k's 8 in 128-bit lane k.
struct IndexTables {
  alignas(64) int16_t scale[2][2][32];
  alignas(64) int8_t q4k_words[5][2][64];
};

constexpr IndexTables make_index_tables() {
  IndexTables t{};
  for (int h = 0; h < 2; ++h)
    for (int w = 0; w < 32; ++w) {
      const int j = w / 2;
      t.scale[0][h][w] = static_cast<int16_t>(4 * h + (j % 4) / 2 + 2 * (j / 8));
      t.scale[1][h][w] = static_cast<int16_t>(8 * h + 4 * ((j % 4) / 2) + j / 4);
      for (int k = 0; k < 4; ++k) t.q4k_words[k][h][2 * w] = static_cast<int8_t>(16 * k + t.scale[0][h][w]);
    }
  for (int w = 0; w < 32; ++w) t.q4k_words[4][0][2 * w] = static_cast<int8_t>(16 * (w / 8) + 8 + w % 8);
  return t;
}

constexpr IndexTables kIndex = make_index_tables();

/// kIndex.scale[six][h] in a register.
KV_VNNI inline __m512i scale_index(bool six, int h) { return _mm512_load_si512(kIndex.scale[six ? 1 : 0][h]); }

/// One weight super-block unpacked: the 4 chunks' u8 quants, the scale words of chunk pairs 0
/// and 1, and (Q4_K/Q5_K) the mins as 8 words.
struct WBlock {
  __m512i q[4], s[2];
  __m128i mins;
  float d, dmin;
};

/// q4k_scales_mins in one register (no store to memory): u = bytes 0-11 as 32-bit words; word 0
/// u0 & k1, word 1 (u2 & k2) | ((u0 >> 6) & k3) << 4, word 2 u1 & k1, word 3
/// ((u2 >> 4) & k2) | ((u1 >> 6) & k3) << 4, where ((v >> 6) & k3) << 4 = (v >> 2) & 0x30303030.
KV_VNNI inline __m128i q4k_scales_mins_vnni(const uint8_t* s12) {
  const __m128i u = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s12));  // bytes 12-15: the next field, unused
  const __m128i a = _mm_shuffle_epi32(u, _MM_SHUFFLE(2, 1, 2, 0)), b = _mm_shuffle_epi32(u, _MM_SHUFFLE(1, 1, 0, 0));
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(a, _mm_setr_epi32(0, 0, 0, 4)),
                                   _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi32(b, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm_or_si128(lo, hi);
}

/// The Q4_K/Q5_K quants: chunk 2 h + s = nibble s of qs[64 h .. 64 h + 63] (| bit 4 from qh).
template <bool Five>
KV_VNNI inline void q4k_quants(const uint8_t* blk, __m512i* q) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const uint8_t* qs = blk + (Five ? 48 : 16);
  __m512i qhb;
  if constexpr (Five) qhb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 16)));
  for (int h = 0; h < 2; ++h) {
    const __m512i z = _mm512_loadu_si512(qs + 64 * h);
    q[2 * h] = _mm512_and_si512(z, m4);
    q[2 * h + 1] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
    if constexpr (Five) {  // chunk (h, s): bit 4 h + s of qh[l] in its low half, 4 h + s + 2 in its high half
      for (int s = 0; s < 2; ++s) {
        const __m512i cnt = _mm512_inserti64x4(_mm512_set1_epi16(static_cast<int16_t>(4 * h + s)),
                                               _mm256_set1_epi16(static_cast<int16_t>(4 * h + s + 2)), 1);
        const __m512i bit = _mm512_and_si512(_mm512_srlv_epi16(qhb, cnt), _mm512_set1_epi8(1));
        q[2 * h + s] = _mm512_or_si512(q[2 * h + s], _mm512_slli_epi16(bit, 4));
      }
    }
  }
}

/// The Q4_K/Q5_K unpacking: q4k_quants, the scale words (sidx: scale_index) and the mins, d and dmin.
template <bool Five>
KV_VNNI inline void unpack_q4k(const uint8_t* blk, const __m512i* sidx, WBlock& wb) {
  q4k_quants<Five>(blk, wb.q);
  const __m256i sm16 = _mm256_cvtepu8_epi16(q4k_scales_mins_vnni(blk + 4));
  wb.s[0] = _mm512_permutexvar_epi16(sidx[0], _mm512_zextsi256_si512(sm16));
  wb.s[1] = _mm512_permutexvar_epi16(sidx[1], _mm512_zextsi256_si512(sm16));
  wb.mins = _mm256_extracti128_si256(sm16, 1);
  uint32_t dd;
  std::memcpy(&dd, blk, 4);
  const __m128 df = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(dd)));  // exact, as f16_to_f32
  wb.d = _mm_cvtss_f32(df);
  wb.dmin = _mm_cvtss_f32(_mm_movehdup_ps(df));
}

/// The Q6_K quants: chunk 2 h + s = elements 128 h + 64 s + [0, 64), 6-bit quants 0..63.
KV_VNNI inline void q6k_quants(const uint8_t* blk, __m512i* q) {
  const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
  const __m512i up = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
  const __m512i down = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  for (int h = 0; h < 2; ++h) {
    const __m512i ql = _mm512_loadu_si512(blk + 64 * h);
    const __m512i qhb = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 128 + 32 * h)));
    q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), _mm512_and_si512(_mm512_sllv_epi16(qhb, up), m30));
    q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4),
                                   _mm512_and_si512(_mm512_srlv_epi16(qhb, down), m30));
  }
}

/// The Q6_K group scales as the scale words of chunk pairs 0 and 1 (sidx: scale_index).
KV_VNNI inline void q6k_scale_words(const uint8_t* blk, const __m512i* sidx, __m512i* s) {
  const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 192)));
  s[0] = _mm512_permutexvar_epi16(sidx[0], _mm512_zextsi256_si512(sc16));
  s[1] = _mm512_permutexvar_epi16(sidx[1], _mm512_zextsi256_si512(sc16));
}

/// The Q6_K unpacking: q6k_quants, the scale words and d.
KV_VNNI inline void unpack_q6k(const uint8_t* blk, const __m512i* sidx, WBlock& wb) {
  q6k_quants(blk, wb.q);
  q6k_scale_words(blk, sidx, wb.s);
  uint16_t dd;
  std::memcpy(&dd, blk + 208, 2);
  wb.d = _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(dd)));  // exact, as f16_to_f32
  wb.dmin = 0.0f;
}

/// The 16 int32 lanes of one weight super-block against one activation super-block's chunks x,
/// vpdpbusd starting from base (zero, or for Q6_K -32 times the sums of x's 4-element groups).
KV_VNNI inline __m512i lanes(const __m512i* q, const __m512i* s, const __m512i* x, const __m512i* base) {
  const __m512i p0 = _mm512_packs_epi32(_mm512_dpbusd_epi32(base[0], q[0], x[0]), _mm512_dpbusd_epi32(base[1], q[1], x[1]));
  const __m512i p1 = _mm512_packs_epi32(_mm512_dpbusd_epi32(base[2], q[2], x[2]), _mm512_dpbusd_epi32(base[3], q[3], x[3]));
  const __m512i zero = _mm512_setzero_si512();
  return _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(zero, p0, s[0]), p1, s[1]);
}

/// Adds weight block wb's products with activation super-block xb (chunks x, vpdpbusd bases
/// `base`) to acc and accm.
template <int Type>
KV_VNNI inline void block_fma(const WBlock& wb, const __m512i* x, const __m512i* base, const Int8Rows& xr, int64_t xb,
                              __m512& acc, __m128& accm) {
  const float dx = xr.d[xb];
  acc = _mm512_fmadd_ps(_mm512_set1_ps(wb.d * dx), _mm512_cvtepi32_ps(lanes(wb.q, wb.s, x, base)), acc);
  if constexpr (Type != 6) {
    const __m128i b32 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(xr.bsums32 + xb * 8));
    const __m128 mi = _mm_cvtepi32_ps(_mm_madd_epi16(wb.mins, b32));
    accm = _mm_fmadd_ps(_mm_set1_ps(-(wb.dmin * dx)), mi, accm);
  }
}

/// Activation super-block xb's 4 chunks into x and the vpdpbusd bases: zero, or for Q6_K
/// ((q - 32) x) -32 times the sums of x's 4-element groups.
template <int Type>
KV_VNNI inline void load_x(const int8_t* xq, __m512i* x, __m512i* base) {
  const __m512i zero = _mm512_setzero_si512(), k32 = _mm512_set1_epi8(32);
  for (int c = 0; c < 4; ++c) {
    x[c] = _mm512_loadu_si512(xq + 64 * c);
    base[c] = Type == 6 ? _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, k32, x[c])) : zero;
  }
}

/// R weight rows (rows[0] + i ld, nb super-blocks each) against the m quantized rows (m >= 2):
/// out[i * m + r]. Type: 4 (Q4_K), 5 (Q5_K) or 6 (Q6_K). Prefetches the bytes `ahead` past the
/// tile's, R blocks' worth per step. All R weight blocks of a step are unpacked, then dotted with each x row.
template <int Type, int R>
KV_VNNI void tile_vnni(const uint8_t* rows, int64_t ld, int64_t ahead, int64_t nb, const Int8Rows& xr, int64_t K,
                       int64_t m, float* out) {
  constexpr int64_t bytes = Type == 4 ? kQ4KBytes : Type == 5 ? kQ5KBytes : kQ6KBytes;
  const __m512i sidx[2] = {scale_index(Type == 6, 0), scale_index(Type == 6, 1)};
  __m512 acc[R][kInt8MaxRows];
  __m128 accm[R][kInt8MaxRows];
  for (int i = 0; i < R; ++i)
    for (int64_t r = 0; r < m; ++r) acc[i][r] = _mm512_setzero_ps(), accm[i][r] = _mm_setzero_ps();
  const int8_t* xbase = Type == 6 ? xr.qs : xr.qs_k4;
  const auto pf = reinterpret_cast<uintptr_t>(rows) + static_cast<uintptr_t>(ahead);  // never dereferenced
  __m512i x[4], base[4];
  for (int64_t b = 0; b < nb; ++b) {
    for (int64_t l = 0; l < R * bytes; l += 64)
      _mm_prefetch(reinterpret_cast<const char*>(pf + static_cast<uintptr_t>(b * R * bytes + l)), _MM_HINT_T0);
    WBlock wb[R];
    for (int i = 0; i < R; ++i) {
      if constexpr (Type == 6) unpack_q6k(rows + i * ld + b * bytes, sidx, wb[i]);
      else unpack_q4k<Type == 5>(rows + i * ld + b * bytes, sidx, wb[i]);
    }
    for (int64_t r = 0; r < m; ++r) {
      const int64_t xb = r * (K / kKBlock) + b;
      load_x<Type>(xbase + xb * kKBlock, x, base);
      for (int i = 0; i < R; ++i) block_fma<Type>(wb[i], x, base, xr, xb, acc[i][r], accm[i][r]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int64_t r = 0; r < m; ++r) out[i * m + r] = finish(acc[i][r], accm[i][r]);
}

// ---- VNNI form, one activation row --------------------------------------

/// Bytes [off, off + 16) of the blocks at p[0..3], block i's in 128-bit lane i.
KV_VNNI inline __m512i quad_load(const uint8_t* const* p, int off) {
  __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p[0] + off)));
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[1] + off)), 1);
  v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[2] + off)), 2);
  return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p[3] + off)), 3);
}

/// q4k_scales_mins_vnni of 4 blocks at once (u = quad_load(p, 4)): lane i holds block i's 8 scales, then its 8 mins.
KV_VNNI inline __m512i q4k_scales_mins_x4(__m512i u) {
  const __m512i a = _mm512_shuffle_epi32(u, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(2, 1, 2, 0)));
  const __m512i b = _mm512_shuffle_epi32(u, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 1, 0, 0)));
  const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(a, _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0, 0, 4))),
                                      _mm512_broadcast_i32x4(_mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f)));
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(b, 2), _mm512_broadcast_i32x4(_mm_setr_epi32(0, 0x30303030, 0, 0x30303030)));
  return _mm512_or_si512(lo, hi);
}

/// The 4 blocks' (p) d and dmin times their activation scales dx[0..3], as the scalar form's products:
/// Q4_K/Q5_K [d_0 dx_0, -(dmin_0 dx_0), d_1 dx_1, ...], Q6_K [d_0 dx_0, ..., d_3 dx_3, 0, 0, 0, 0]
/// (dmin (-dx) = -(dmin dx) exactly).
template <int Type>
KV_VNNI inline __m256 quad_factors(const uint8_t* const* p, const float* dx) {
  const __m128 dx4 = _mm_loadu_ps(dx);
  if constexpr (Type == 6) {
    uint16_t h[4];
    for (int i = 0; i < 4; ++i) std::memcpy(&h[i], p[i] + 208, 2);
    const __m128i w = _mm_setr_epi16(static_cast<int16_t>(h[0]), static_cast<int16_t>(h[1]), static_cast<int16_t>(h[2]),
                                     static_cast<int16_t>(h[3]), 0, 0, 0, 0);
    return _mm256_castps128_ps256(_mm_mul_ps(_mm_cvtph_ps(w), dx4));
  } else {
    int32_t h[4];
    for (int i = 0; i < 4; ++i) std::memcpy(&h[i], p[i], 4);
    const __m256 sgn = _mm256_castsi256_ps(_mm256_setr_epi32(0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN, 0, INT32_MIN));
    const __m256 dxx = _mm256_permutexvar_ps(_mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3), _mm256_castps128_ps256(dx4));
    return _mm256_mul_ps(_mm256_cvtph_ps(_mm_setr_epi32(h[0], h[1], h[2], h[3])), _mm256_xor_ps(dxx, sgn));
  }
}

/// kIndex.q4k_words[k][h] in a register.
KV_VNNI inline __m512i q4k_word_index(int k, int h) { return _mm512_load_si512(kIndex.q4k_words[k][h]); }

/// One W row (nb super-blocks) against one quantized row, for Type 4 (Q4_K), 5 (Q5_K) or 6 (Q6_K): the
/// steps of tile_vnni with one row and one x row, 4 super-blocks at a time: their scale bytes in one
/// register, their d (and dmin) converted and multiplied by their dx together, their mins products from
/// one vpmaddwd. Q6_K's quants go into vpdpbusd uncentred (q x fits the packed words) and the packed
/// words get prepare_kquant's -32 x sums added (the same integers as the tile's vpdpbusd bases), its
/// activations read from qs_k4's records. The row is one sequential stream, prefetched `ahead` bytes ahead
/// into L1 and kAheadL2Bytes ahead into L2.
template <int Type>
KV_VNNI float row_one(const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t ahead) {
  constexpr int64_t bytes = Type == 4 ? kQ4KBytes : Type == 5 ? kQ5KBytes : kQ6KBytes;
  const __m512i sidx[2] = {scale_index(Type == 6, 0), scale_index(Type == 6, 1)};
  constexpr __mmask64 kEven = 0x5555555555555555ULL;
  __m512 acc = _mm512_setzero_ps();
  __m128 accm = _mm_setzero_ps();
  const int8_t* xbase = Type == 6 ? xr.qs : xr.qs_k4;
  const auto pf = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(ahead);  // never dereferenced
  const auto pf2 = reinterpret_cast<uintptr_t>(row) + static_cast<uintptr_t>(kAheadL2Bytes);
  __m512i x[4], base[4];
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) {
    for (int64_t l = 0; l < 4 * bytes; l += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + static_cast<uintptr_t>(b * bytes + l)), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(pf2 + static_cast<uintptr_t>(b * bytes + l)), _MM_HINT_T1);
    }
    const uint8_t* p[4] = {row + b * bytes, row + (b + 1) * bytes, row + (b + 2) * bytes, row + (b + 3) * bytes};
    alignas(32) float f[8];
    _mm256_store_ps(f, quad_factors<Type>(p, xr.d + b));
    __m512i sm = _mm512_setzero_si512();
    if constexpr (Type != 6) {
      sm = q4k_scales_mins_x4(quad_load(p, 4));
      const __m512i b32 = _mm512_loadu_si512(xr.bsums32 + b * 8);
      alignas(64) float mi[16];
      _mm512_store_ps(mi, _mm512_cvtepi32_ps(_mm512_madd_epi16(_mm512_maskz_permutexvar_epi8(kEven, q4k_word_index(4, 0), sm), b32)));
      for (int k = 0; k < 4; ++k) accm = _mm_fmadd_ps(_mm_set1_ps(f[2 * k + 1]), _mm_load_ps(mi + 4 * k), accm);
    }
    for (int k = 0; k < 4; ++k) {
      __m512i q[4], s[2];
      const int8_t* xq = Type == 6 ? xr.qs_k4 + (b + k) * kQ6XBytes : xbase + (b + k) * kKBlock;
      for (int c = 0; c < 4; ++c) x[c] = _mm512_loadu_si512(xq + 64 * c);
      if constexpr (Type == 6) {
        q6k_quants(p[k], q);
        q6k_scale_words(p[k], sidx, s);
      } else {
        q4k_quants<Type == 5>(p[k], q);
        s[0] = _mm512_maskz_permutexvar_epi8(kEven, q4k_word_index(k, 0), sm);
        s[1] = _mm512_maskz_permutexvar_epi8(kEven, q4k_word_index(k, 1), sm);
      }
      const __m512i zero = _mm512_setzero_si512();
      __m512i p0 = _mm512_packs_epi32(_mm512_dpbusd_epi32(zero, q[0], x[0]), _mm512_dpbusd_epi32(zero, q[1], x[1]));
      __m512i p1 = _mm512_packs_epi32(_mm512_dpbusd_epi32(zero, q[2], x[2]), _mm512_dpbusd_epi32(zero, q[3], x[3]));
      if constexpr (Type == 6) {  // centre: q x - 32 x per 4 elements, exact in int16 (|q x| <= 32004)
        p0 = _mm512_add_epi16(p0, _mm512_loadu_si512(xq + kKBlock));
        p1 = _mm512_add_epi16(p1, _mm512_loadu_si512(xq + kKBlock + 64));
      }
      const __m512i li = _mm512_dpwssd_epi32(_mm512_madd_epi16(p0, s[0]), p1, s[1]);
      acc = _mm512_fmadd_ps(_mm512_set1_ps(f[Type == 6 ? k : 2 * k]), _mm512_cvtepi32_ps(li), acc);
    }
  }
  for (; b < nb; ++b) {  // the last nb % 4 super-blocks one at a time
    WBlock wb;
    if constexpr (Type == 6) unpack_q6k(row + b * bytes, sidx, wb);
    else unpack_q4k<Type == 5>(row + b * bytes, sidx, wb);
    load_x<Type>(xbase + b * kKBlock, x, base);
    block_fma<Type>(wb, x, base, xr, b, acc, accm);
  }
  return finish(acc, accm);
}

/// tile_vnni for the weight's dtype, R rows and m >= 2 activation rows.
template <int R>
void tile_for(Dtype dt, const uint8_t* rows, int64_t ld, int64_t ahead, int64_t nb, const Int8Rows& xr, int64_t K,
              int64_t m, float* out) {
  if (dt == Dtype::Q4_K) return tile_vnni<4, R>(rows, ld, ahead, nb, xr, K, m, out);
  if (dt == Dtype::Q5_K) return tile_vnni<5, R>(rows, ld, ahead, nb, xr, K, m, out);
  return tile_vnni<6, R>(rows, ld, ahead, nb, xr, K, m, out);
}

/// row_one for the weight's dtype.
float row_for(Dtype dt, const uint8_t* row, int64_t nb, const Int8Rows& xr, int64_t ahead) {
  if (dt == Dtype::Q4_K) return row_one<4>(row, nb, xr, ahead);
  if (dt == Dtype::Q5_K) return row_one<5>(row, nb, xr, ahead);
  return row_one<6>(row, nb, xr, ahead);
}

}  // namespace

void prepare_kquant(const Int8Rows& xr, int64_t m, int64_t K, Dtype dt) {
  if (dt == Dtype::Q6_K) {  // per chunk pair h, vpackssdw's order: lane L, chunk 2 h + s, 4-element group 4 L + i
    for (int64_t xb = 0; xb < m * (K / kKBlock); ++xb) {
      std::memcpy(xr.qs_k4 + xb * kQ6XBytes, xr.qs + xb * kKBlock, kKBlock);
      for (int h = 0; h < 2; ++h)
        for (int w = 0; w < 32; ++w) {
          const int8_t* q = xr.qs + xb * kKBlock + 64 * (2 * h + (w % 8) / 4) + 4 * (4 * (w / 8) + w % 4);
          const int16_t v = static_cast<int16_t>(-32 * (q[0] + q[1] + q[2] + q[3]));
          std::memcpy(xr.qs_k4 + xb * kQ6XBytes + kKBlock + 2 * (32 * h + w), &v, 2);
        }
    }
    return;
  }
  for (int64_t xb = 0; xb < m * (K / kKBlock); ++xb) {
    const int8_t* q = xr.qs + xb * kKBlock;
    int8_t* o = xr.qs_k4 + xb * kKBlock;
    for (int c = 0; c < 4; ++c) {
      const int e0 = 128 * (c / 2) + 32 * (c % 2);
      std::memcpy(o + 64 * c, q + e0, 32);
      std::memcpy(o + 64 * c + 32, q + e0 + 64, 32);
    }
    for (int j = 0; j < 8; ++j)
      xr.bsums32[xb * 8 + j] = static_cast<int16_t>(xr.bsums[xb * 16 + 2 * j] + xr.bsums[xb * 16 + 2 * j + 1]);
  }
}

void kquant_rows(const Weight& w, const Int8Rows& xr, int64_t m, int64_t n0, int64_t n1, bool vnni, float* y,
                 bool accumulate) {
  const int64_t N = w.n_out(), K = w.n_in(), nb = K / kKBlock;
  const auto* raw = static_cast<const uint8_t*>(w.raw());
  const int64_t ld = w.ld(), ahead = kAheadTiles * kTile * ld;
  if (vnni && m == 1) {  // one sequential stream over the rows
    for (int64_t n = n0; n < n1; ++n) {
      const float v = row_for(w.dtype(), raw + n * ld, nb, xr, kAheadBytes);
      y[n] = accumulate ? y[n] + v : v;
    }
    return;
  }
  float v[kTile * kInt8MaxRows];
  for (int64_t n = n0; n < n1;) {
    const int rows = vnni && n + kTile <= n1 ? kTile : 1;
    const uint8_t* rp = raw + n * ld;
    if (!vnni) row_scalar(w.dtype(), rp, nb, xr, K, m, v);
    else if (rows == kTile) tile_for<kTile>(w.dtype(), rp, ld, ahead, nb, xr, K, m, v);
    else tile_for<1>(w.dtype(), rp, ld, ahead, nb, xr, K, m, v);
    for (int i = 0; i < rows; ++i)
      for (int64_t r = 0; r < m; ++r) {
        float& o = y[r * N + n + i];
        o = accumulate ? o + v[i * m + r] : v[i * m + r];
      }
    n += rows;
  }
}

}  // namespace kveval::backend::int8_detail
