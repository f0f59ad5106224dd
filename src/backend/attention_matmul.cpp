// Causal grouped-query attention for long query blocks: per kv head, two oneDNN
// batched matmuls (S = Q·Kᵀ, O = S·V) around a masked softmax. Short blocks go
// to the loop paths (attention.cpp).
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "backend/attention_impl.hpp"
#include "backend/backend.hpp"
#include "backend/engine_impl.hpp"
#include "backend/simd_exp.hpp"
#include "util/error.hpp"

namespace kveval::backend {

namespace {
using detail::check_kv_view;
using detail::widen_row;

/// The oneDNN path's softmax: row r of S [G * n_q, n_ctx] holds query i = r % n_q's
/// raw dot products q · k[p]; it becomes the softmax over the positions the
/// query at past + i sees (opts.first_visible .. past + i) of their scores
/// (scale_softcap), the other entries 0.
void masked_softmax_rows(float* S, int64_t rows, int64_t n_q, int64_t n_ctx, int64_t past, float scale,
                         const AttentionOptions& opts) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % n_q, len = past + i + 1, first = opts.first_visible(past + i);
    float* row = S + r * n_ctx;
    float s = scale;  // the multiplier still to apply
    if (opts.softcap > 0.0f) {
      for (int64_t p = first; p < len; ++p) row[p] = scale_softcap(row[p], scale, opts.softcap);
      s = 1.0f;
    }
    float mx = -INFINITY;
    for (int64_t p = first; p < len; ++p) mx = std::max(mx, row[p] * s);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t p = first; p < len; ++p) {
      const float e = detail::simd_exp(row[p] * s - mx);
      row[p] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int64_t p = first; p < len; ++p) row[p] *= inv;
    std::fill(row, row + first, 0.0f);
    for (int64_t p = len; p < n_ctx; ++p) row[p] = 0.0f;
  }
}
/// kv head hk's K (which 0) or V (1) at positions [0, n_ctx) as f32 rows, `stride`
/// floats apart: in place for an f32 view from position 0, else copied (16-bit
/// ones widened) into dst [n_ctx, head_dim], the positions before kv.begin as
/// zero rows (their scores are masked to 0, so 0 · v adds the same as a held row).
float* head_rows(const KvView& kv, int which, int64_t hk, int64_t n_ctx, int64_t head_dim, float* dst,
                 int64_t& stride) {
  const void* base = which == 0 ? kv.k : kv.v;
  const bool narrow = kv.dtype != Dtype::F32;  // BF16 or F16
  if (!narrow && kv.begin == 0) {
    stride = kv.pos_stride;
    return const_cast<float*>(static_cast<const float*>(base) + hk * kv.head_stride);
  }
  const int64_t b = kv.begin, HD = head_dim;
  std::fill(dst, dst + b * HD, 0.0f);
#pragma omp parallel for schedule(static)
  for (int64_t p = b; p < n_ctx; ++p) {
    const int64_t at = hk * kv.head_stride + (p - b) * kv.pos_stride;
    if (narrow)
      widen_row(static_cast<const uint16_t*>(base) + at, kv.dtype, dst + p * HD, HD);
    else
      std::copy_n(static_cast<const float*>(base) + at, HD, dst + p * HD);
  }
  stride = HD;
  return dst;
}

/// A token-tree block (opts.tree): the trunk as a causal block (any path), then
/// the other tree nodes by the loop path, which honours the tree mask.
void tree_attention(Engine& engine, const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past,
                    int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t q_stride, Buffer& scratch,
                    const AttentionOptions& opts) {
  if (past != 0) throw ArgumentError(fmt::format("attention: a tree mask needs past 0, got {}", past));
  const int64_t trunk = std::clamp<int64_t>(opts.tree->trunk, 0, n_q);
  AttentionOptions causal = opts;
  causal.tree = nullptr;
  if (trunk > 0) attention(engine, q, kv, out, trunk, 0, n_head, n_head_kv, head_dim, q_stride, scratch, causal);
  if (n_q > trunk)
    attention(q + trunk * q_stride, kv, out + trunk * n_head * head_dim, n_q - trunk, trunk, n_head, n_head_kv,
              head_dim, q_stride, opts);
}

}  // namespace

void attention(Engine& engine, const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t q_stride, Buffer& scratch,
               const AttentionOptions& opts) {
  if (q_stride == 0) q_stride = n_head * head_dim;
  check_kv_view(kv, past, opts);
  if (opts.tree != nullptr) {
    tree_attention(engine, q, kv, out, n_q, past, n_head, n_head_kv, head_dim, q_stride, scratch, opts);
    return;
  }
  if (attention_uses_loop(n_q, past, head_dim)) {  // short blocks or narrow heads: call overhead would dominate
    attention(q, kv, out, n_q, past, n_head, n_head_kv, head_dim, q_stride, opts);
    return;
  }
  // Causal blocks: queries [c0, c1) attend to positions [0, past + c1), so the
  // masked upper triangle costs ~1/(2 * blocks) of the square instead of half.
  constexpr int64_t kBlock = kAttentionQueryBlock;
  if (n_q > kBlock) {
    for (int64_t c0 = 0; c0 < n_q; c0 += kBlock)
      attention(engine, q + c0 * q_stride, kv, out + c0 * n_head * head_dim, std::min(kBlock, n_q - c0), past + c0,
                n_head, n_head_kv, head_dim, q_stride, scratch, opts);
    return;
  }
  auto& im = engine.impl();
  omp_set_num_threads(im.threads);
  const int64_t G = n_head / n_head_kv, n_ctx = past + n_q, HD = head_dim;
  const float scale = opts.scale_for(HD);
  const bool copied = kv.dtype != Dtype::F32 || kv.begin > 0;  // head_rows copies K and V
  // Scores, then (copied) one kv head's K and V as f32 [n_ctx, HD].
  scratch.reserve(static_cast<size_t>(G * n_q * n_ctx + (copied ? 2 * n_ctx * HD : 0)));
  float* S = scratch.data();
  float* kw = S + G * n_q * n_ctx;
  float* vw = kw + n_ctx * HD;
  using dt = dnnl::memory::data_type;
  auto& qk = im.get_attn(0, G);
  auto& sv = im.get_attn(1, G);
  const int64_t out_stride = n_head * HD;
  try {
    for (int64_t hk = 0; hk < n_head_kv; ++hk) {
      // S[g, i, p] = q[i, hk*G + g, :] · k[p, hk, :]
      dnnl::memory qm({{G, n_q, HD}, dt::f32, {HD, q_stride, 1}}, im.eng, const_cast<float*>(q + hk * G * HD));
      int64_t ks = 0;
      float* kh = head_rows(kv, 0, hk, n_ctx, HD, kw, ks);
      dnnl::memory km({{1, HD, n_ctx}, dt::f32, {HD * n_ctx, 1, ks}}, im.eng, kh);
      dnnl::memory sm({{G, n_q, n_ctx}, dt::f32, {n_q * n_ctx, n_ctx, 1}}, im.eng, S);
      dnnl::memory sp1(qk.scratch_md, im.eng, im.scratch.data());
      qk.prim.execute(im.strm, {{DNNL_ARG_SRC, qm}, {DNNL_ARG_WEIGHTS, km}, {DNNL_ARG_DST, sm}, {DNNL_ARG_SCRATCHPAD, sp1}});
      im.strm.wait();
      masked_softmax_rows(S, G * n_q, n_q, n_ctx, past, scale, opts);
      // out[i, hk*G + g, :] = sum_p S[g, i, p] v[p, hk, :]
      int64_t vs = 0;
      float* vh = head_rows(kv, 1, hk, n_ctx, HD, vw, vs);
      dnnl::memory vm({{1, n_ctx, HD}, dt::f32, {n_ctx * HD, vs, 1}}, im.eng, vh);
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
