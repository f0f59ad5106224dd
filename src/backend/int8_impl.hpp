#pragma once
// Internal to int8_dot.cpp and int8_kquants.cpp: the quantized activation rows
// in int8_matmul's scratch and the K-quant row kernels.
#include <cstdint>

#include "backend/backend.hpp"

#define KV_VNNI __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

namespace kveval::backend::int8_detail {

/// The quantized activation rows in a scratch buffer (K = n_in): quants qs [m, K]
/// in element order, scales d [m, K / 32] (Q8_0) or [m, K / 256] (Q8_K) and,
/// for Q8_K, bsums [m, K / 256, 16] (sums of 16 quants), bsums32 [m, K / 256, 8]
/// (sums of 32: bsums[2 j] + bsums[2 j + 1]) and qs_k4 [m, 3 K / 2] bytes, filled by
/// prepare_kquant for the weight's dtype.
struct Int8Rows {
  int8_t* qs = nullptr;
  float* d = nullptr;
  int16_t* bsums = nullptr;
  int16_t* bsums32 = nullptr;
  int8_t* qs_k4 = nullptr;
};

/// 16 lanes summed: a_l = v_l + v_{l+8}, t_l = a_l + a_{l+4}, (t_0 + t_2) + (t_1 + t_3).
inline float reduce16(const float* v) {
  float a[8], t[4];
  for (int l = 0; l < 8; ++l) a[l] = v[l] + v[l + 8];
  for (int l = 0; l < 4; ++l) t[l] = a[l] + a[l + 4];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

/// The parts of `scratch` (int8_scratch_floats(m, K) floats) for m rows of K activations.
Int8Rows carve(float* scratch, int64_t m, int64_t K);

/// Fills what the K-quant kernels of dtype dt read beside qs, d and bsums of the m quantized Q8_K
/// rows. Q4_K, Q5_K: bsums32 and qs_k4, whose super-block chunk c = 2 h + s (64 bytes) holds elements
/// 128 h + 32 s + [0, 32) then 128 h + 32 s + 64 + [0, 32), the elements of the low (s = 0) or high
/// (s = 1) nibbles of Q4_K's qs[64 h .. 64 h + 63]. Q6_K: qs_k4 holds per super-block 384 bytes, its 256
/// quants in element order, then [2][32] int16: -32 times the sums of 4 consecutive quants (the terms that
/// centre Q6_K's quants on 32) in vpackssdw's word order, word w of chunk pair h the sum of group
/// 4 (w / 8) + w % 4 of chunk 2 h + (w % 8) / 4 (elements 64 c + 4 g + [0, 4)).
void prepare_kquant(const Int8Rows& xr, int64_t m, int64_t K, Dtype dt);

/// Rows [n0, n1) of y [m, N] (+)= the int8 products of a Q4_K, Q5_K or Q6_K weight with
/// the m quantized rows (int8_dot.hpp gives the operation order); `vnni` picks the form.
void kquant_rows(const Weight& w, const Int8Rows& xr, int64_t m, int64_t n0, int64_t n1, bool vnni, float* y,
                 bool accumulate);

}  // namespace kveval::backend::int8_detail
