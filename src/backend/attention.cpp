// Causal grouped-query attention, the loop paths: the AVX-512 head kernel and
// the position-major loop, one parallel loop over (sequence, query, kv-head
// chunk) items. The oneDNN batched matmuls for long blocks: attention_matmul.cpp.
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "backend/attention_impl.hpp"
#include "backend/backend.hpp"
#include "backend/engine_impl.hpp"
#include "backend/kernel_isa.hpp"
#include "backend/simd_exp.hpp"
#include "util/bf16.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

// GCC 12's AVX-512 intrinsics warn about their own undefined pass-through operand.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace kveval::backend {

namespace detail {

void check_kv_view(const KvView& kv, int64_t past, const AttentionOptions& opts) {
  if (kv.dtype != Dtype::F32 && kv.dtype != Dtype::BF16 && kv.dtype != Dtype::F16)
    throw ArgumentError(fmt::format("attention: K/V dtype {} (f32, bf16 or f16 only)", to_string(kv.dtype)));
  const int64_t first = opts.tree ? 0 : opts.first_visible(past);
  if (kv.begin < 0 || kv.begin > first)
    throw ArgumentError(fmt::format("attention: the K/V view starts at position {}; the query at {} sees position {}",
                                    kv.begin, past, first));
}

void widen_row(const uint16_t* src, Dtype dtype, float* dst, int64_t n) {
  if (dtype == Dtype::F16) {
    util::f16_to_f32_n(src, dst, static_cast<size_t>(n));
    return;
  }
#pragma omp simd
  for (int64_t d = 0; d < n; ++d) dst[d] = util::bf16_to_f32(src[d]);
}

}  // namespace detail

using detail::check_kv_view;
using detail::widen_row;

namespace {
constexpr int64_t kAhead = 8;  // positions prefetched ahead in the loop attention (4 and 16 measured slower at 1 thread)

/// Replaces sp[p] by e^(sp[p] - m) for p in [0, len) and returns their float sum
/// (softmax numerators; the vectorised sum's order is fixed by the loop).
inline float exp_shifted_sum(float* sp, int64_t len, float m) {
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (int64_t p = 0; p < len; ++p) {
    const float e = detail::simd_exp(sp[p] - m);
    sp[p] = e;
    sum += e;
  }
  return sum;
}

/// detail::simd_exp on 16 lanes (the same steps: clamp, Cody-Waite reduction,
/// Cephes' degree-6 polynomial, 2^n through the exponent bits).
__attribute__((target("avx512f"), always_inline)) inline __m512 exp16(__m512 x) {
  const __m512 lo = _mm512_set1_ps(-87.3365402f), hi = _mm512_set1_ps(88.3762626f);
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  const __mmask16 over = _mm512_cmp_ps_mask(x, hi, _CMP_GT_OQ), under = _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ);
  __m512 xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
  xc = _mm512_mask_blend_ps(nan, xc, _mm512_setzero_ps());
  const __m512 big = _mm512_set1_ps(12582912.0f);
  const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(xc, _mm512_set1_ps(1.44269504088896341f), big), big);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), xc);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
  const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
  __m512 y = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  y = _mm512_mask_blend_ps(over, y, _mm512_set1_ps(INFINITY));
  y = _mm512_mask_blend_ps(under, y, _mm512_setzero_ps());
  return _mm512_mask_blend_ps(nan, y, x);
}

/// exp_shifted_sum in 16 lanes, the tail masked: sp[p] = e^(sp[p] - m) for p
/// in [0, len), returns their sum (lane partial sums, then a fixed tree).
__attribute__((target("avx512f"), always_inline)) inline float exp_shifted_sum16(float* sp, int64_t len, float m) {
  const __m512 mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  int64_t p = 0;
  for (; p + 16 <= len; p += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(sp + p), mv));
    _mm512_storeu_ps(sp + p, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (p < len) {
    const __mmask16 k = static_cast<__mmask16>((1u << (len - p)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, sp + p), mv));
    _mm512_mask_storeu_ps(sp + p, k, e);
    acc = _mm512_mask_add_ps(acc, k, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}

/// One 16-float vector holding, in lane j, the sum of the 16 lanes of acc[j]:
/// a transpose-and-add tree that pairs lanes i and i + 8, then i and i + 4,
/// i + 2 and i + 1 (the order of GCC's _mm512_reduce_add_ps), so lane j does
/// not depend on the other 15 vectors.
__attribute__((target("avx512f"), always_inline)) inline __m512 sum_lanes16(const __m512* acc) {
  __m512 w[8], x[4], z[2];
  for (int j = 0; j < 8; ++j)  // 128-bit lanes [a.L0+a.L2, a.L1+a.L3, b.L0+b.L2, b.L1+b.L3], a = acc[j], b = acc[j + 8]
    w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[j], acc[j + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(acc[j], acc[j + 8], _MM_SHUFFLE(3, 2, 3, 2)));
  for (int j = 0; j < 4; ++j)  // 128-bit lanes: positions j, j + 8, j + 4, j + 12; 4 partial sums each
    x[j] = _mm512_add_ps(_mm512_shuffle_f32x4(w[j], w[j + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[j], w[j + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int j = 0; j < 2; ++j)  // within each 128-bit lane: [x0+x2, x1+x3, y0+y2, y1+y3], y = x[j + 2]
    z[j] = _mm512_add_ps(_mm512_shuffle_ps(x[j], x[j + 2], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[j], x[j + 2], _MM_SHUFFLE(3, 2, 3, 2)));
  const __m512 r = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                 _mm512_shuffle_ps(z[0], z[1], _MM_SHUFFLE(3, 1, 3, 1)));
  // r holds position {0,2,1,3, 8,10,9,11, 4,6,5,7, 12,14,13,15}[lane]; the map is its own inverse.
  const __m512i order = _mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15);
  return _mm512_permutexvar_ps(order, r);
}

/// Positions the head kernel prefetches ahead: K two 16-position score blocks
/// ahead, V 16 positions ahead. A decode step's attention reads many short
/// streams (one per row, layer and kv head: 100 positions of bf16 K are 12.8 KB)
/// that the hardware prefetchers barely ramp up on (measured:
/// docs/design/decode-kernels.md, "Attention").
constexpr int64_t kKAhead = 32, kVAhead = 16;

/// Prefetches the rows of positions [p, p + n) (head_dim elements of T each).
template <class T>
inline void prefetch_positions(const T* base, int64_t pos_stride, int64_t p, int64_t n, int64_t head_dim) {
  for (int64_t j = 0; j < n; ++j) {
    const char* r = reinterpret_cast<const char*>(base + (p + j) * pos_stride);
    for (int64_t b = 0; b < head_dim * static_cast<int64_t>(sizeof(T)); b += 64) __builtin_prefetch(r + b);
  }
}
/// An IEEE half's bits: the element type of an F16 KvView in the head kernel
/// (a distinct type so that load16 picks vcvtph2ps; uint16_t means bf16).
struct F16Bits {
  uint16_t bits;
};

/// 16 K or V elements as floats: f32 as they are, bf16 bits widened exactly
/// (shifted into the upper half of each 32-bit lane), f16 widened exactly by
/// vcvtph2ps (AVX-512F).
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
__attribute__((target("avx512f"), always_inline)) inline __m512 load16(const F16Bits* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

/// Row of K or V holding position p: rows[p], or p itself when rows is null.
inline int64_t row_of(const int64_t* rows, int64_t p) { return rows ? rows[p] : p; }

/// Scaled scores of one query head against 16 positions from p0 (the first
/// `m` of them real, the others 0): lane j = scale * q · k[row_of(rows, p0 + j)],
/// each dot as NV 16-float products added in order, then sum_lanes16.
template <int NV, bool Full, class T>
__attribute__((target("avx512f"), always_inline)) inline __m512 scores16(const __m512* qr, const T* k,
                                                                        int64_t pos_stride, const int64_t* rows,
                                                                        int64_t p0, int64_t m, __m512 scale) {
  __m512 acc[16];
#pragma GCC unroll 16
  for (int j = 0; j < 16; ++j) {
    if (!Full && j >= m) {
      acc[j] = _mm512_setzero_ps();
      continue;
    }
    const T* kp = k + row_of(rows, p0 + j) * pos_stride;
    acc[j] = _mm512_mul_ps(qr[0], load16(kp));
#pragma GCC unroll 8
    for (int c = 1; c < NV; ++c) acc[j] = _mm512_fmadd_ps(qr[c], load16(kp + 16 * c), acc[j]);
  }
  return _mm512_mul_ps(sum_lanes16(acc), scale);
}

/// Soft-caps the scaled scores row[0, len) in place when softcap > 0
/// (scale_softcap with scale 1: the scale is already applied). Every path's
/// score transform after the dot product.
inline void softcap_row(float* row, int64_t len, float softcap) {
  if (softcap <= 0.0f) return;
  for (int64_t p = 0; p < len; ++p) row[p] = scale_softcap(row[p], 1.0f, softcap);
}

/// heads_avx512's scores: sc[g, p] = scale * q_g · k[row_of(rows, p)] for the
/// G heads, p in [0, len), in 16-position blocks (each block of K rows read
/// from memory once for all G heads).
template <int NV, class T>
__attribute__((target("avx512f"), always_inline)) inline void head_scores(const float* q, int64_t G, const T* k,
                                                                         int64_t pos_stride, const int64_t* rows,
                                                                         int64_t len, float scale, float* sc,
                                                                         int64_t sc_stride) {
  constexpr int64_t HD = 16 * NV;
  const __m512 sv = _mm512_set1_ps(scale);
  int64_t p0 = 0;
  for (; p0 + 16 <= len; p0 += 16) {
    if (p0 + kKAhead < len && !rows)
      prefetch_positions(k, pos_stride, p0 + kKAhead, std::min<int64_t>(16, len - p0 - kKAhead), HD);
    for (int64_t g = 0; g < G; ++g) {
      __m512 qr[NV];
      for (int c = 0; c < NV; ++c) qr[c] = _mm512_loadu_ps(q + g * HD + 16 * c);
      _mm512_storeu_ps(sc + g * sc_stride + p0, scores16<NV, true, T>(qr, k, pos_stride, rows, p0, 16, sv));
    }
  }
  if (p0 < len) {
    const int64_t m = len - p0;
    const __mmask16 mask = static_cast<__mmask16>((1u << m) - 1);
    for (int64_t g = 0; g < G; ++g) {
      __m512 qr[NV];
      for (int c = 0; c < NV; ++c) qr[c] = _mm512_loadu_ps(q + g * HD + 16 * c);
      _mm512_mask_storeu_ps(sc + g * sc_stride + p0, mask, scores16<NV, false, T>(qr, k, pos_stride, rows, p0, m, sv));
    }
  }
}

/// Softmax numerators of each of the G score rows in place (soft-capped first
/// when softcap > 0), with max subtraction; inv[g] = 1 / the row's sum.
__attribute__((target("avx512f"))) inline void softmax_rows16(float* sc, int64_t G, int64_t sc_stride, int64_t len,
                                                              float softcap, float* inv) {
  for (int64_t g = 0; g < G; ++g) {
    float* sp = sc + g * sc_stride;
    softcap_row(sp, len, softcap);
    // The largest score, 16 lanes at a time (GCC leaves the max reduction
    // scalar: a 4-cycle dependency per position). A NaN score is skipped, as
    // std::max(mx, s) skips it; the maximum of the others is exact in any order.
    __m512 vm = _mm512_set1_ps(-INFINITY);
    int64_t p = 0;
    for (; p + 16 <= len; p += 16) vm = _mm512_max_ps(_mm512_loadu_ps(sp + p), vm);
    if (p < len) {
      const __mmask16 m = static_cast<__mmask16>((1u << (len - p)) - 1);
      vm = _mm512_mask_max_ps(vm, m, _mm512_maskz_loadu_ps(m, sp + p), vm);
    }
    inv[g] = 1.0f / exp_shifted_sum16(sp, len, _mm512_reduce_max_ps(vm));
  }
}

/// heads_avx512's weighted sum of V: acc[g, 2, HD] = sum_p sc[g, p] v[row_of(rows, p)] over
/// blocks of kVBlock positions (V read once for the G heads), even and odd
/// positions in two accumulator sets (halving the fma chains' latency).
template <int NV, class T>
__attribute__((target("avx512f"), always_inline)) inline void head_values(const float* sc, int64_t G, int64_t sc_stride,
                                                                          const T* v, int64_t pos_stride,
                                                                          const int64_t* rows, int64_t len, float* acc) {
  constexpr int64_t HD = 16 * NV;
  constexpr int64_t kVBlock = 32;  // even: the two accumulator sets see the same position pairs as one pass would
  std::fill(acc, acc + G * 2 * HD, 0.0f);
  for (int64_t pb = 0; pb < len; pb += kVBlock) {
    const int64_t pe = std::min(len, pb + kVBlock);
    for (int64_t g = 0; g < G; ++g) {
      const float* sp = sc + g * sc_stride;
      float* ag = acc + g * 2 * HD;
      __m512 o0[NV], o1[NV];
      for (int c = 0; c < NV; ++c) {
        o0[c] = _mm512_loadu_ps(ag + 16 * c);
        o1[c] = _mm512_loadu_ps(ag + HD + 16 * c);
      }
      int64_t p = pb;
      for (; p + 2 <= pe; p += 2) {
        const __m512 a0 = _mm512_set1_ps(sp[p]), a1 = _mm512_set1_ps(sp[p + 1]);
        if (g == 0 && p + kVAhead + 1 < len && !rows) prefetch_positions(v, pos_stride, p + kVAhead, 2, HD);
        const T* v0 = v + row_of(rows, p) * pos_stride;
        const T* v1 = v + row_of(rows, p + 1) * pos_stride;
#pragma GCC unroll 8
        for (int c = 0; c < NV; ++c) {
          o0[c] = _mm512_fmadd_ps(a0, load16(v0 + 16 * c), o0[c]);
          o1[c] = _mm512_fmadd_ps(a1, load16(v1 + 16 * c), o1[c]);
        }
      }
      if (p < pe) {  // the last position when len is odd
        const __m512 a0 = _mm512_set1_ps(sp[p]);
        for (int c = 0; c < NV; ++c) o0[c] = _mm512_fmadd_ps(a0, load16(v + row_of(rows, p) * pos_stride + 16 * c), o0[c]);
      }
      for (int c = 0; c < NV; ++c) {
        _mm512_storeu_ps(ag + 16 * c, o0[c]);
        _mm512_storeu_ps(ag + HD + 16 * c, o1[c]);
      }
    }
  }
}

/// The `G` query heads sharing one kv head, head_dim = 16 NV (AVX-512): q and
/// out [G, head_dim]; K and V rows of positions [0, len) `pos_stride` apart
/// (position p in row rows[p] when rows is not null: a tree query's ancestors).
/// Scores go to sc [G, sc_stride] (head_scores), then softmax in float with
/// max subtraction after the soft-cap (softmax_rows16: 1 / sum in inv[G]),
/// then out = (sum_p e_p v_p) / sum_p e_p (head_values; the G heads' running
/// sums wait in acc [G, 2, head_dim]). Each head's bits depend only on its own
/// q, K, V and len, not on G. T: float, uint16_t for bf16 or F16Bits for f16 K
/// and V (widened as read).
template <int NV, class T>
__attribute__((target("avx512f"))) void heads_avx512(const float* q, int64_t G, const void* k_, const void* v_,
                                                    int64_t pos_stride, const int64_t* rows, int64_t len, float scale,
                                                    float softcap, float* sc, int64_t sc_stride, float* inv, float* acc,
                                                    float* out) {
  constexpr int64_t HD = 16 * NV;
  head_scores<NV, T>(q, G, static_cast<const T*>(k_), pos_stride, rows, len, scale, sc, sc_stride);
  softmax_rows16(sc, G, sc_stride, len, softcap, inv);
  head_values<NV, T>(sc, G, sc_stride, static_cast<const T*>(v_), pos_stride, rows, len, acc);
  for (int64_t g = 0; g < G; ++g) {
    const __m512 iv = _mm512_set1_ps(inv[g]);
    const float* ag = acc + g * 2 * HD;
    for (int c = 0; c < NV; ++c)
      _mm512_storeu_ps(out + g * HD + 16 * c,
                       _mm512_mul_ps(_mm512_add_ps(_mm512_loadu_ps(ag + 16 * c), _mm512_loadu_ps(ag + HD + 16 * c)), iv));
  }
}

using HeadKernel = void (*)(const float*, int64_t, const void*, const void*, int64_t, const int64_t*, int64_t, float,
                            float, float*, int64_t, float*, float*, float*);

template <class T>
HeadKernel head_kernel_t(int64_t head_dim) {
  switch (head_dim / 16) {
    case 1: return heads_avx512<1, T>;
    case 2: return heads_avx512<2, T>;
    case 3: return heads_avx512<3, T>;
    case 4: return heads_avx512<4, T>;
    case 5: return heads_avx512<5, T>;
    case 6: return heads_avx512<6, T>;
    case 7: return heads_avx512<7, T>;
    case 8: return heads_avx512<8, T>;
    default: return nullptr;
  }
}

/// heads_avx512 for this head_dim and K/V dtype (F32, BF16 or F16), or nullptr
/// (head_dim not 16-128 in steps of 16, or no AVX-512): the caller then takes
/// the position-major loop.
HeadKernel head_kernel(int64_t head_dim, Dtype kv = Dtype::F32) {
  if (kernel_isa() != KernelIsa::Avx512 || head_dim % 16 != 0) return nullptr;
  if (kv == Dtype::BF16) return head_kernel_t<uint16_t>(head_dim);
  if (kv == Dtype::F16) return head_kernel_t<F16Bits>(head_dim);
  return head_kernel_t<float>(head_dim);
}


/// The position-major loop for one item (query qi, query heads [h0, h0 + nh)
/// = kv heads [hk0, hk1), the `len` positions of `kv` it sees): scores into sc
/// [nh, sc_stride] (soft-capped when softcap > 0; max in mx, 1 / sum in inv),
/// then out [nh, head_dim] = softmax-weighted sum of V rows. kv head hk's rows
/// start at kv.k/kv.v + (hk - hk_base) * head_stride (f32; hk_base = hk0 for a
/// view of just these heads).
void loop_item(const float* qi, const KvView& kv, int64_t hk_base, int64_t hk0, int64_t hk1, int64_t group,
               int64_t head_dim, int64_t len, float scale, float softcap, float* sc, int64_t sc_stride, float* mx,
               float* inv, float* oi) {
  const float* K = static_cast<const float*>(kv.k);
  const float* V = static_cast<const float*>(kv.v);
  const int64_t h0 = hk0 * group, nh = (hk1 - hk0) * group;
  for (int64_t hl = 0; hl < nh; ++hl) mx[hl] = -INFINITY;
  // Rows of kv heads [hk0, hk1) at position p of K or V, one cache line at a time.
  const int64_t head_bytes = head_dim * static_cast<int64_t>(sizeof(float));
  auto prefetch_rows = [&](const float* base, int64_t p) {
    const bool side_by_side = kv.head_stride == head_dim;  // one span for all heads
    for (int64_t hk = hk0; hk < (side_by_side ? hk0 + 1 : hk1); ++hk) {
      const char* row = reinterpret_cast<const char*>(base + (hk - hk_base) * kv.head_stride + p * kv.pos_stride);
      const int64_t bytes = side_by_side ? (hk1 - hk0) * head_bytes : head_bytes;
      for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b);
    }
  };
  for (int64_t p = 0; p < len; ++p) {
    if (p + kAhead < len) prefetch_rows(K, p + kAhead);
    for (int64_t hl = 0; hl < nh; ++hl) {
      const int64_t h = h0 + hl;
      const float* qv = qi + h * head_dim;
      const float* kp = K + (h / group - hk_base) * kv.head_stride + p * kv.pos_stride;
      float d_qk = 0.0f;
#pragma omp simd reduction(+ : d_qk)
      for (int64_t d = 0; d < head_dim; ++d) d_qk += qv[d] * kp[d];
      d_qk *= scale;
      sc[hl * sc_stride + p] = d_qk;
      mx[hl] = std::max(mx[hl], d_qk);
    }
  }
  if (softcap > 0.0f)
    for (int64_t hl = 0; hl < nh; ++hl) {
      float* row = sc + hl * sc_stride;
      softcap_row(row, len, softcap);
      mx[hl] = -INFINITY;
      for (int64_t p = 0; p < len; ++p) mx[hl] = std::max(mx[hl], row[p]);
    }
  for (int64_t hl = 0; hl < nh; ++hl) inv[hl] = 1.0f / exp_shifted_sum(sc + hl * sc_stride, len, mx[hl]);
  std::fill(oi, oi + nh * head_dim, 0.0f);
  for (int64_t p = 0; p < len; ++p) {
    if (p + kAhead < len) prefetch_rows(V, p + kAhead);
    for (int64_t hl = 0; hl < nh; ++hl) {
      const float a = sc[hl * sc_stride + p] * inv[hl];
      const float* vp = V + ((h0 + hl) / group - hk_base) * kv.head_stride + p * kv.pos_stride;
      float* o = oi + hl * head_dim;
#pragma omp simd
      for (int64_t d = 0; d < head_dim; ++d) o[d] += a * vp[d];
    }
  }
}

/// kv heads [hk0, hk1), positions [0, len) of a BF16 or F16 view widened into
/// w [2][hk1 - hk0][len][head_dim] (K, then V): the f32 view loop_item reads
/// with hk_base = hk0, so 16-bit K/V give the f32 loop's bits exactly.
KvView widen_heads(const KvView& kv, int64_t hk0, int64_t hk1, int64_t head_dim, int64_t len, std::vector<float>& w) {
  const int64_t nk = hk1 - hk0, n = nk * len * head_dim;
  if (w.size() < static_cast<size_t>(2 * n)) w.resize(static_cast<size_t>(2 * n));
  for (int which = 0; which < 2; ++which) {
    const uint16_t* src = static_cast<const uint16_t*>(which == 0 ? kv.k : kv.v);
    float* dst = w.data() + which * n;
    for (int64_t hk = hk0; hk < hk1; ++hk)
      for (int64_t p = 0; p < len; ++p) {
        widen_row(src + hk * kv.head_stride + p * kv.pos_stride, kv.dtype, dst + ((hk - hk0) * len + p) * head_dim,
                  head_dim);
      }
  }
  return KvView{w.data(), w.data() + n, head_dim, len * head_dim};
}

/// What every item of one multi-sequence loop attention shares.
struct LoopPlan {
  int64_t n_head = 0, n_head_kv = 0, head_dim = 0, q_stride = 0, group = 0;
  int64_t per_chunk = 0, n_chunks = 0;  // kv heads per item (the last chunk may hold fewer), chunks per query
  int64_t max_ctx = 0;                  // score row stride
  float scale = 0.0f;
  AttentionOptions opts;
  HeadKernel f32 = nullptr, bf16 = nullptr, f16 = nullptr;  // heads_avx512 per K/V dtype, or nullptr (the loop)
};

/// Per-thread buffers of the loop attention, grown once: scores [heads per
/// chunk][max_ctx], per-head max and 1/sum, heads_avx512's V sums, 16-bit K/V
/// widened, a tree query's visible rows and gathered K/V.
struct LoopScratch {
  std::vector<float> scores, mx, inv, vacc, widened, tree_keys;
  std::vector<int64_t> tree_rows;
  void reserve(const LoopPlan& pl) {
    const auto heads = static_cast<size_t>(pl.per_chunk * pl.group);
    if (scores.size() < heads * static_cast<size_t>(pl.max_ctx)) scores.resize(heads * static_cast<size_t>(pl.max_ctx));
    const auto acc = static_cast<size_t>(pl.group * 2 * pl.head_dim);
    if (pl.f32 && vacc.size() < acc) vacc.resize(acc);
    if (mx.size() < heads) {
      mx.resize(heads);
      inv.resize(heads);
    }
  }
};

/// The kernels on one item's `len` visible positions, handed over as positions
/// [0, len) of `kv` whose kv head hk starts at (hk - hk_base) * head_stride
/// (position p in row rows[p] of kv when rows is not null): heads_avx512 kv head
/// by kv head when available, else loop_item (16-bit K/V widened first: the f32
/// loop's arithmetic on the exact f32 values; rows must then be null).
void run_item(const LoopPlan& pl, const float* qi, const KvView& kv, int64_t hk_base, int64_t hk0, int64_t hk1,
              int64_t len, LoopScratch& b, float* out_i, const int64_t* rows = nullptr) {
  const int64_t HD = pl.head_dim, G = pl.group;
  const bool narrow = kv.dtype != Dtype::F32;  // BF16 or F16
  const int64_t esize = narrow ? 2 : 4;
  float* sc = b.scores.data();
  if (pl.f32) {  // kv head by kv head, each K and V row read once
    const HeadKernel hkern = kv.dtype == Dtype::BF16 ? pl.bf16 : kv.dtype == Dtype::F16 ? pl.f16 : pl.f32;
    for (int64_t hk = hk0; hk < hk1; ++hk) {
      const int64_t off = (hk - hk_base) * kv.head_stride * esize;  // bytes
      hkern(qi + hk * G * HD, G, static_cast<const char*>(kv.k) + off, static_cast<const char*>(kv.v) + off,
            kv.pos_stride, rows, len, pl.scale, pl.opts.softcap, sc, pl.max_ctx, b.inv.data(), b.vacc.data(),
            out_i + hk * G * HD);
    }
    return;
  }
  float* oi = out_i + hk0 * G * HD;
  if (narrow)
    loop_item(qi, widen_heads(kv, hk0, hk1, HD, len, b.widened), hk0, hk0, hk1, G, HD, len, pl.scale,
              pl.opts.softcap, sc, pl.max_ctx, b.mx.data(), b.inv.data(), oi);
  else
    loop_item(qi, kv, hk_base, hk0, hk1, G, HD, len, pl.scale, pl.opts.softcap, sc, pl.max_ctx, b.mx.data(),
              b.inv.data(), oi);
}

/// Item (query i, chunk c of kv heads) of sequence sq: the query at block
/// index past + i (its position, unless it is a tree node's) sees positions
/// [first_visible, position], handed to the kernels as positions [0, len) of a
/// view shifted to the first of them (a tree node's rows gathered unless they
/// are side by side: a node whose visible ancestors are the block indices just before it).
void attend_item(const LoopPlan& pl, const AttentionSeq& sq, int64_t i, int64_t c, LoopScratch& b) {
  const int64_t hk0 = c * pl.per_chunk, hk1 = std::min(pl.n_head_kv, hk0 + pl.per_chunk);
  const float* qi = sq.q + i * pl.q_stride;
  float* out_i = sq.out + i * pl.n_head * pl.head_dim;
  const int64_t t = sq.past + i;
  int64_t first = pl.opts.first_visible(t), len = t + 1 - first;
  if (pl.opts.tree && t >= pl.opts.tree->trunk) {
    detail::tree_rows(*pl.opts.tree, pl.opts, t, b.tree_rows);
    len = static_cast<int64_t>(b.tree_rows.size());
    first = b.tree_rows.front();
    if (t - first + 1 != len) {  // ancestors not side by side: read through their rows, or gathered for the loop
      if (pl.f32) {
        run_item(pl, qi, sq.kv, 0, hk0, hk1, len, b, out_i, b.tree_rows.data());
        return;
      }
      const KvView g = detail::gather_tree_keys(b.tree_rows, sq.kv, pl.head_dim, hk0, hk1, b.tree_keys);
      run_item(pl, qi, g, hk0, hk0, hk1, len, b, out_i);
      return;
    }
  }
  const int64_t esize = sq.kv.dtype != Dtype::F32 ? 2 : 4;
  KvView kv = sq.kv;
  kv.k = static_cast<const char*>(sq.kv.k) + (first - sq.kv.begin) * kv.pos_stride * esize;
  kv.v = static_cast<const char*>(sq.kv.v) + (first - sq.kv.begin) * kv.pos_stride * esize;
  run_item(pl, qi, kv, 0, hk0, hk1, len, b, out_i);
}

}  // namespace

bool attention_uses_loop(int64_t n_q, int64_t past, int64_t head_dim) {
  if (n_q < 16 || head_dim < 32) return true;
  // Without a cached prefix the head kernel re-reads K and V per query from
  // cache and still beats the two batched matmuls per kv head up to 64 queries;
  // with a cached prefix the matmuls win (docs/design/decode-kernels.md).
  constexpr int64_t kLoopMaxQueries = 64;
  return past == 0 && n_q <= kLoopMaxQueries && head_kernel(head_dim) != nullptr;
}

void attention(const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t q_stride, const AttentionOptions& opts) {
  const AttentionSeq one{q, kv, out, n_q, past};
  attention(std::span<const AttentionSeq>(&one, 1), n_head, n_head_kv, head_dim, q_stride, opts);
}

void attention(std::span<const AttentionSeq> seqs, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
               int64_t q_stride, const AttentionOptions& opts) {
  LoopPlan pl;
  pl.n_head = n_head;
  pl.n_head_kv = n_head_kv;
  pl.head_dim = head_dim;
  pl.q_stride = q_stride == 0 ? n_head * head_dim : q_stride;
  pl.group = n_head / n_head_kv;
  pl.scale = opts.scale_for(head_dim);
  pl.opts = opts;
  // Items: (sequence, query i, chunk of kv heads). With AVX-512 and head_dim
  // 16-128 (heads_avx512) an item runs kv head by kv head: 16-position score
  // blocks, then V in 32-position blocks, each block read once for the kv
  // head's query heads (docs/design/decode-kernels.md). Otherwise each item reads positions
  // front to back, and at each position the K (then V) rows of all its kv heads,
  // prefetched kAhead positions ahead (side by side in the [pos][kv_head][head_dim]
  // layout of cache-free passes; one stream per head in the cache's
  // [kv_head][pos][head_dim]). Chunks split the kv heads so that every thread
  // has work (a one-row decode step on 2 threads: two halves of the heads;
  // items of (query, head) would give 12 heads as 8 to one thread and 4 to the
  // other). A head's arithmetic does not depend on the chunking, the item order
  // or the thread count. Items [first[s], first[s + 1]) belong to sequence s.
  if (opts.tree) detail::check_tree(seqs, *opts.tree);
  int64_t queries = 0, cost = 0;
  for (const AttentionSeq& s : seqs) {
    check_kv_view(s.kv, s.past, opts);
    queries += s.n_q;
    pl.max_ctx = std::max(pl.max_ctx, s.past + s.n_q);
    cost += s.n_q * n_head * (s.past + s.n_q) * head_dim;
  }
  if (queries == 0) return;
  const int threads = cost > 32768 ? omp_get_max_threads() : 1;
  const int64_t chunks = std::clamp<int64_t>((2 * threads + queries - 1) / queries, 1, n_head_kv);
  pl.per_chunk = (n_head_kv + chunks - 1) / chunks;
  pl.n_chunks = (n_head_kv + pl.per_chunk - 1) / pl.per_chunk;
  thread_local std::vector<int64_t> first;
  first.assign(1, 0);
  for (const AttentionSeq& s : seqs) first.push_back(first.back() + s.n_q * pl.n_chunks);
  const int64_t work = first.back();
  const int64_t* firsts = first.data();
  const int64_t n_seqs = static_cast<int64_t>(seqs.size());
  pl.f32 = head_kernel(head_dim, Dtype::F32);
  pl.bf16 = head_kernel(head_dim, Dtype::BF16);
  pl.f16 = head_kernel(head_dim, Dtype::F16);
#pragma omp parallel num_threads(threads)
  {
    thread_local LoopScratch scratch;  // no allocation per call in the decode loop
    scratch.reserve(pl);
    int64_t s = 0;
#pragma omp for schedule(dynamic, 1)
    for (int64_t w = 0; w < work; ++w) {
      if (w < firsts[s] || w >= firsts[s + 1])  // items come in increasing order per thread chunk
        s = std::upper_bound(firsts, firsts + n_seqs + 1, w) - firsts - 1;
      const int64_t item = w - firsts[s];
      attend_item(pl, seqs[static_cast<size_t>(s)], item / pl.n_chunks, item % pl.n_chunks, scratch);
    }
  }
}

}  // namespace kveval::backend
