// Causal grouped-query attention: an OpenMP loop for short blocks, oneDNN
// batched matmuls for long ones.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "backend/engine_impl.hpp"
#include "backend/simd_exp.hpp"

namespace kveval::backend {

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
      float* sp = scores.data();
#pragma omp simd reduction(+ : sum)
      for (int64_t p = 0; p < len; ++p) {
        const float e = detail::simd_exp(sp[p] - mx);
        sp[p] = e;
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
#pragma omp simd reduction(+ : sum)
        for (int64_t p = 0; p < len; ++p) {
          const float e = detail::simd_exp(row[p] * scale - mx);
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
