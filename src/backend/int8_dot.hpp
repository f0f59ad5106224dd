#pragma once
// Internal to src/backend: decode products on kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks
// with int8 activations (MatmulMode::Int8), llama.cpp's vec_dot scheme: each
// activation row is quantized per block as ggml's quantize_row_q8_K_ref /
// quantize_row_q8_0_ref do (ggml-quants.c), then multiplied with the weight
// blocks' integer quants in int32 (ggml-cpu/quants.c ggml_vec_dot_q4_K_q8_K,
// q5_K_q8_K, q6_K_q8_K, q8_0_q8_0, q4_0_q8_0), the scales applied in f32.
#include <cstdint>

#include "backend/backend.hpp"

namespace kveval::backend {

/// Rows int8_matmul takes at most (decode steps; matmul sends up to kInvariantMinRows).
inline constexpr int64_t kInt8MaxRows = 16;

/// True for the weight dtypes int8_matmul multiplies: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
bool int8_kernel(Dtype d);

/// Whether the AVX-512 VNNI form (vpdpbusd) runs: kernel_isa() is Avx512, the
/// CPU has AVX512-VNNI and oneDNN's effective ISA includes avx512_core_vnni
/// (so DNNL_MAX_CPU_ISA turns it off as it does the other kernels). Otherwise
/// the scalar form runs; both give the same bits. Computed once.
bool int8_has_vnni();

/// Floats of scratch int8_matmul needs for m rows of n_in activations (the
/// quants, scales and 16-element sums of the quantized rows, 64-byte aligned parts).
int64_t int8_scratch_floats(int64_t m, int64_t n_in);

/// ggml's quantize_row_q8_K_ref on x[n] (n a multiple of kKBlock, else
/// ArgumentError), split into arrays: per super-block b of 256 values, with
/// amax = max |x| and `max` the first value of that magnitude, iscale = -127 /
/// max, qs[j] = min(127, round-half-even(iscale x_j)), d[b] = 1 / iscale and
/// bsums[16 b + g] = sum of qs over elements 16 g .. 16 g + 15. A block with
/// amax = 0, or whose iscale overflows (amax below about 1e-37), becomes d = 0
/// and zero quants (ggml: the same for 0; undefined quants for the latter).
void quantize_row_q8_K(const float* x, int64_t n, int8_t* qs, float* d, int16_t* bsums);

/// ggml's quantize_row_q8_0_ref on x[n] (n a multiple of kQBlock, else
/// ArgumentError): per block b of 32 values, dd = amax / 127, qs[j] =
/// roundf(x_j / dd) (half away from zero; 1 / dd taken once, as ggml), d[b] =
/// dd rounded to f16 and back (ggml's block_q8_0 stores it as f16). A block
/// whose f16 scale is 0 (amax below about 4e-6) gets zero quants; where dd
/// exceeds the f16 range (amax >= 127 x 65520) d[b] keeps dd in f32 (ggml's
/// f16 would be Inf).
void quantize_row_q8_0(const float* x, int64_t n, int8_t* qs, float* d);

/// y[m, n_out] (+)= x[m, n_in] · Wᵀ for a Q8_0, Q4_0, Q4_K, Q5_K or Q6_K weight and 1 <= m
/// <= kInt8MaxRows rows, with x quantized first (Q4_K, Q5_K, Q6_K:
/// quantize_row_q8_K; Q8_0, Q4_0: quantize_row_q8_0) into `scratch`
/// (int8_scratch_floats(m, n_in) floats). Output n, per x row:
/// - Q4_K, Q5_K, Q6_K: 16 f32 lanes acc_j, and for Q4_K/Q5_K 4 more accm_i, from 0. Super-block
///   b (activation scale dx) gives 16 int32 lanes I_j = Σ sc(e) q_e xq_e over the elements e
///   of lane j (sc: the sub-block's 6-bit scale, Q6_K the group's int8 scale; q the 4- or 5-bit
///   quant, Q6_K the 6-bit quant - 32), where element e, r = e % 128, goes to lane
///   4 (p / 16) + 2 s + (p % 16) / 8 with Q4_K/Q5_K s = (r / 32) % 2, p = r % 32 + 32 (r / 64) and
///   Q6_K s = r / 64, p = r % 64 (the lanes vpdpbusd, vpackssdw and vpdpwssd give); then
///   acc_j = fma(d_w dx, I_j, acc_j) and, Q4_K/Q5_K, accm_i = fma(-(dmin_w dx), M_i, accm_i) with
///   M_i = m_{2i} B_{2i} + m_{2i+1} B_{2i+1} (m the 6-bit mins, B_j the sum of sub-block j's
///   32 activation quants). The output is reduce16(acc) + ((accm_0 + accm_2) + (accm_1 + accm_3)),
///   reduce16: a_l = acc_l + acc_{l+8}, t_l = a_l + a_{l+4}, (t_0 + t_2) + (t_1 + t_3);
/// - Q8_0: 16 f32 lanes; block b adds to lane 8 (b % 2) + l (l < 8)
///   fma(d_w,b dx_b, p, lane) with p = Σ_{k<4} q[4 l + k] xq[4 l + k] (int32;
///   Q4_0 likewise with q = nibble - 8, element j < 16 the low nibble of byte j;
///   d_w,b the block's f16 scale as f32), then reduce16.
/// The integer sums are exact; the VNNI form (int8_has_vnni) computes them with
/// vpdpbusd and its f32 steps in the same order as the scalar form, so both
/// give the same bits (`vnni` picks the form; true where unavailable throws).
/// The K-quant VNNI form with one x row walks W's rows one after another, 4 super-blocks at a
/// time (one sequential stream per thread); with more x rows it walks tiles of 4 W rows, each
/// weight super-block unpacked once and dotted with every x row; the Q8_0/Q4_0 VNNI form 4 rows at a time per x row
/// (the rows' blocks as in the file, each row a stream). Both prefetch ahead in their streams. Rows of W split among
/// `threads` OpenMP threads in
/// contiguous ranges of whole 4-row tiles (one thread below kDecodeParallelMacs
/// multiply-adds); each output depends only on its x row and W row. Throws
/// ArgumentError for another dtype or m out of range.
void int8_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads, float* scratch,
                 bool vnni);

/// int8_matmul on this CPU's form (int8_has_vnni()).
inline void int8_matmul(const float* x, int64_t m, const Weight& w, float* y, bool accumulate, int threads,
                        float* scratch) {
  int8_matmul(x, m, w, y, accumulate, threads, scratch, int8_has_vnni());
}

}  // namespace kveval::backend
