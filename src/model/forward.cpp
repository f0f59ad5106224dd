// Context::forward in named steps: check and pack the batch, embed, per layer
// attention_block + ffn_block, output_head.
#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "model/context_impl.hpp"
#include "util/error.hpp"

namespace kveval {

namespace be = kveval::backend;

auto Context::Impl::check_pass(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens,
                               size_t logit_rows, std::span<float> logits_out) const -> Pass {
  if (batch < 1 || seq < 1 || tokens.size() != static_cast<size_t>(batch) * seq || n_tokens.size() != static_cast<size_t>(batch))
    throw ArgumentError(fmt::format("forward: tokens has {} ids and n_tokens {} rows for batch {} x seq {}", tokens.size(),
                                    n_tokens.size(), batch, seq));
  const size_t need = logit_rows * static_cast<size_t>(w.hp.n_vocab);
  if (logits_out.size() < need)
    throw ArgumentError(fmt::format("forward: logits_out holds {} floats, {} needed", logits_out.size(), need));
  Pass p;
  p.cached = cache_enabled;
  if (p.cached && batch > cache.batch_size())
    throw CacheError(fmt::format("forward: batch {} exceeds the KV cache's batch size {}; call setup_caches with batch_size >= {}",
                                 batch, cache.batch_size(), batch));
  // When decode steps of a few rows are row-invariant (kveval's kernels: f32 on
  // AVX-512, bf16 with AVX512-BF16; be::decode_invariant_rows), a cached pass
  // packs its one-token sequences first and its prompts after: the first go
  // through the decode path, the others through the batch-invariant one, so a
  // sequence's bits do not depend on what else shares the pass (static or
  // dynamic batching, any batch of up to decode_invariant_rows rows). The price:
  // a pass with both reads the weights twice.
  // Decided by the compute dtype, not by one matrix (a Q8_0 model may hold an F32 one).
  // Where every product is row-invariant (bf16 whose decode kernel and oneDNN
  // sum alike: be::matmul_rows_invariant), one product serves the whole pass.
  const be::Dtype cdt = w.dtype == ComputeDtype::BF16 ? be::Dtype::BF16 : be::Dtype::F32;
  p.split = p.cached && (w.dtype == ComputeDtype::F32 || w.dtype == ComputeDtype::BF16) &&
            !be::matmul_rows_invariant(cdt) && be::decode_invariant_rows(cdt) > 0;
  // Cache-free passes score log-likelihoods: make every row's result independent
  // of how requests were batched (bit-identical for batch_size 1 vs 8).
  p.inv = !p.cached;
  for (int r = 0; r < batch; ++r) {
    const int n = n_tokens[static_cast<size_t>(r)];
    if (n < 0 || n > seq) throw ArgumentError(fmt::format("forward: n_tokens[{}] = {} outside [0, {}]", r, n, seq));
    if (p.cached && cache.n_past(r) + n > cache.capacity())
      throw CacheError(fmt::format("KV cache full: row {} holds {} of {} positions and {} more were written; "
                                   "set up caches with max_seq_len >= {}",
                                   r, cache.n_past(r), cache.capacity(), n, cache.n_past(r) + n));
  }
  return p;
}

// Packs the valid tokens of all rows: sequence s = row seq_row[s], tokens [seq_start[s], +seq_len[s]).
void Context::Impl::pack_batch(Pass& p, int batch, std::span<const int> n_tokens) {
  seq_row.clear();
  seq_start.clear();
  seq_len.clear();
  for (int group = 0; group < (p.split ? 2 : 1); ++group)
    for (int r = 0; r < batch; ++r) {
      const int n = n_tokens[static_cast<size_t>(r)];
      if (n == 0 || (p.split && (n == 1) != (group == 0))) continue;
      seq_row.push_back(r);
      seq_start.push_back(static_cast<int>(p.T));
      seq_len.push_back(n);
      p.T += static_cast<size_t>(n);
      if (p.split && group == 0) ++p.Td;
    }
  p.row_order = std::is_sorted(seq_row.begin(), seq_row.end());
}

// Zeroes only what no matmul writes: padding positions and rows without tokens.
void Context::Impl::zero_padding(int batch, int seq, std::span<const int> n_tokens, Logits mode,
                                 std::span<float> logits_out) const {
  const size_t V = static_cast<size_t>(w.hp.n_vocab);
  auto zero = [&](size_t from, size_t count) {
    std::fill(logits_out.begin() + static_cast<std::ptrdiff_t>(from * V),
              logits_out.begin() + static_cast<std::ptrdiff_t>((from + count) * V), 0.0f);
  };
  for (int r = 0; r < batch; ++r) {
    const int n = n_tokens[static_cast<size_t>(r)];
    if (mode == Logits::All)
      zero(static_cast<size_t>(r) * seq + n, static_cast<size_t>(seq - n));
    else if (n == 0)
      zero(static_cast<size_t>(r), 1);
  }
}

// Positions, token ids (checked against the vocabulary) and embedding rows of the packed tokens.
void Context::Impl::embed(const Pass& p, std::span<const int32_t> tokens, int seq) {
  const HParams& hp = w.hp;
  const int D = hp.n_embd;
  const size_t T = p.T, n_seq = seq_row.size();
  reserve(T, n_seq);
  pos.resize(T);
  tok_ids.resize(T);
  for (size_t s = 0; s < n_seq; ++s) {
    const int r = seq_row[s];
    const int p0 = p.cached ? cache.n_past(r) : 0;
    const backend::TreeMask* tree = seq_tree(s);
    for (int i = 0; i < seq_len[s]; ++i) {
      const int32_t id = tokens[static_cast<size_t>(r) * seq + i];
      if (id < 0 || id >= hp.n_vocab)
        throw ArgumentError(fmt::format("forward: token id {} at [{}, {}] outside [0, {})", id, r, i, hp.n_vocab));
      tok_ids[static_cast<size_t>(seq_start[s] + i)] = id;
      pos[static_cast<size_t>(seq_start[s] + i)] = tree ? static_cast<int32_t>(tree->position(i)) : p0 + i;
    }
  }
  float* xp = x.data();
  if (const be::Weight* kept = w.embd_weight())  // token_embd in its blocks: decode only the looked-up rows
    be::gather_rows(*kept, tok_ids, xp);
  else
    for (size_t t = 0; t < T; ++t)
      std::memcpy(xp + t * D, w.tok_embd.data() + static_cast<size_t>(tok_ids[t]) * D, sizeof(float) * D);
  if (hp.embd_scale != 0.0f) be::scale(xp, static_cast<int64_t>(T) * D, hp.embd_scale);  // Gemma: sqrt(n_embd)
}

// y[T, n_out] (+)= in[T, n_in] · Wᵀ for the pass's packed tokens.
void Context::Impl::matmul(const Pass& p, const float* in, const be::Weight& W, float* y, bool accumulate) {
  be::Engine& eng = *w.engine;
  const int64_t Ti = static_cast<int64_t>(p.T), Td = p.Td;
  if (!p.split) return be::matmul(eng, in, Ti, W, y, accumulate, p.inv);
  if (Td > 0) be::matmul(eng, in, Td, W, y, accumulate, false);
  if (Ti > Td) be::matmul(eng, in + Td * W.n_in(), Ti - Td, W, y + Td * W.n_out(), accumulate, true);
}

// y[T, Σ n_out] = in[T, n_in] · [W₀; W₁; …]ᵀ for a stacked projection: W when it is one weight, else each part's
// product into part_out and copied to its columns of y (the parts' outputs side by side, in order).
void Context::Impl::matmul_stacked(const Pass& p, const float* in, const be::Weight& W, std::span<const be::Weight> parts,
                                   float* y) {
  if (parts.empty()) return matmul(p, in, W, y, false);
  int64_t n_all = 0;
  for (const be::Weight& part : parts) n_all += part.n_out();
  int64_t col = 0;
  for (const be::Weight& part : parts) {
    const int64_t n = part.n_out();
    matmul(p, in, part, part_out.data(), false);
    const int64_t T = static_cast<int64_t>(p.T);
#pragma omp parallel for schedule(static) if (T * n > 65536)
    for (int64_t t = 0; t < T; ++t)
      std::memcpy(y + t * n_all + col, part_out.data() + t * n, sizeof(float) * static_cast<size_t>(n));
    col += n;
  }
}

// x += attn_output(attention(rope(q), rope(k), v)) with q, k, v = attn_norm(x) · wqkvᵀ (+ bias, Q/K norms);
// with post-norms or a residual scale, x += s · post_norm(attn_output(...)) (add_branch).
void Context::Impl::attention_block(const Pass& p, int layer) {
  const HParams& hp = w.hp;
  const detail::Layer& L = w.layers[static_cast<size_t>(layer)];
  const int D = hp.n_embd, HD = hp.head_dim(), KV = w.kv_dim(), NQ = w.q_dim();
  const int64_t Ti = static_cast<int64_t>(p.T);
  float* xp = x.data();
  be::rmsnorm(xp, L.attn_norm.data(), xb.data(), Ti, D, hp.rms_eps);
  // qkv row t: [q (n_head x HD) | k (n_head_kv x HD) | v (n_head_kv x HD)]
  const int64_t QS = NQ + 2 * KV;
  float* q = qkv.data();
  float* k = q + NQ;
  float* v = k + KV;
  matmul_stacked(p, xb.data(), L.wqkv, L.qkv_parts, q);
  if (!L.bqkv.empty()) be::add_bias(q, L.bqkv.data(), Ti, QS);
  if (!L.q_norm.empty()) {  // per-head RMSNorm before RoPE (qwen3)
    be::rmsnorm_heads(q, L.q_norm.data(), Ti, hp.n_head, HD, QS, hp.rms_eps);
    be::rmsnorm_heads(k, L.k_norm.data(), Ti, hp.n_head_kv, HD, QS, hp.rms_eps);
  }
  const be::RopeTable& tab = w.sliding_window(layer) > 0 && w.rope_swa_differs() ? rope_tab_swa : rope_tab;
  be::rope(q, hp.n_head, HD, tab, QS);
  be::rope(k, hp.n_head_kv, HD, tab, QS);
  attend(p, layer, q, k, v);
  if (L.post_attn_norm.empty() && hp.residual_scale == 0.0f) {  // straight into the residual stream
    matmul(p, att.data(), L.wo, xp, /*accumulate=*/true);
    if (!L.bo.empty()) be::add_bias(xp, L.bo.data(), Ti, D);
    return;
  }
  matmul(p, att.data(), L.wo, xb.data(), false);
  if (!L.bo.empty()) be::add_bias(xb.data(), L.bo.data(), Ti, D);
  add_branch(p, L.post_attn_norm);
}

// x += s · post_norm(xb): a block's branch output (in xb) joins the residual
// stream, RMSNorm-ed when the layer has `post_norm` (Gemma 2/3) and scaled by
// the residual scale when set (Granite), else by 1.
void Context::Impl::add_branch(const Pass& p, const std::vector<float>& post_norm) {
  const HParams& hp = w.hp;
  const int64_t Ti = static_cast<int64_t>(p.T);
  if (!post_norm.empty()) be::rmsnorm(xb.data(), post_norm.data(), xb.data(), Ti, hp.n_embd, hp.rms_eps);
  be::add_scaled(x.data(), xb.data(), Ti * hp.n_embd, hp.residual_scale != 0.0f ? hp.residual_scale : 1.0f);
}

// att = attention of each packed sequence over its cached positions (appending
// its K, V first) or, cache-free, over itself.
void Context::Impl::attend(const Pass& p, int layer, float* q, float* k, float* v) {
  const HParams& hp = w.hp;
  const int HD = hp.head_dim(), NQ = w.q_dim();
  const int64_t QS = NQ + 2 * w.kv_dim();
  const be::AttentionOptions opts{hp.attn_scale, hp.attn_softcap, w.sliding_window(layer)};
  short_att.clear();
  for (size_t s = 0; s < seq_row.size(); ++s) {
    const int r = seq_row[s];
    const size_t t0 = static_cast<size_t>(seq_start[s]);
    const int n = seq_len[s];
    be::KvView view;
    int64_t past = 0;
    if (p.cached) {
      past = cache.n_past(r);
      if (n > cache.max_append(layer)) {  // more than a sliding layer's cells take at once
        attend_blocks(layer, r, q + t0 * QS, k + t0 * QS, v + t0 * QS, att.data() + t0 * NQ, n, past, opts);
        continue;
      }
      // Append K, V of the new tokens at positions [past, past + n).
      const uint64_t over = cache.append(layer, r, n, k + t0 * QS, v + t0 * QS, QS);
      stats.kv_f16_overflows += over;
      view = cache.view(layer, r);
    } else {
      view = {k + t0 * QS, v + t0 * QS, QS, HD};
    }
    if (const be::TreeMask* tree = seq_tree(s)) {  // a packed token tree: its own call with its mask
      be::AttentionOptions topts = opts;
      topts.tree = tree;
      be::attention(*w.engine, q + t0 * QS, view, att.data() + t0 * NQ, n, 0, hp.n_head, hp.n_head_kv, HD, QS, scores,
                    topts);
    } else if (be::attention_uses_loop(n, past, HD))  // short blocks (decode steps): one parallel loop for all of them below
      short_att.push_back({q + t0 * QS, view, att.data() + t0 * NQ, n, past});
    else
      be::attention(*w.engine, q + t0 * QS, view, att.data() + t0 * NQ, n, past, hp.n_head, hp.n_head_kv, HD, QS,
                    scores, opts);
  }
  be::attention(short_att, hp.n_head, hp.n_head_kv, HD, QS, opts);
  short_att.clear();
}

// One sequence's n tokens (q, k, v rows QS floats apart, out rows NQ apart)
// at positions [past, past + n) of a sliding layer whose cells take fewer at
// once: blocks of cache.max_append(layer) tokens (backend::kAttentionQueryBlock),
// each appended, then attended. The same calls and bits as one call on all of
// them: the oneDNN attention splits a long block into such blocks itself, and
// the loop paths compute each query on its own.
void Context::Impl::attend_blocks(int layer, int row, const float* q, const float* k, const float* v, float* out,
                                  int n, int64_t past, const be::AttentionOptions& opts) {
  const HParams& hp = w.hp;
  const int HD = hp.head_dim(), NQ = w.q_dim();
  const int64_t QS = NQ + 2 * w.kv_dim();
  const int B = cache.max_append(layer);
  const bool loop = be::attention_uses_loop(n, past, HD);
  for (int c0 = 0; c0 < n; c0 += B) {
    const int m = std::min(B, n - c0);
    stats.kv_f16_overflows += cache.append(layer, row, m, k + c0 * QS, v + c0 * QS, QS, c0);
    const be::KvView view = cache.view(layer, row);
    if (loop)
      be::attention(q + c0 * QS, view, out + int64_t{c0} * NQ, m, past + c0, hp.n_head, hp.n_head_kv, HD, QS, opts);
    else
      be::attention(*w.engine, q + c0 * QS, view, out + int64_t{c0} * NQ, m, past + c0, hp.n_head, hp.n_head_kv, HD,
                    QS, scores, opts);
  }
}

// x += ffn_down(act(ffn_norm(x) · [gate | up]ᵀ)) (+ biases), act = swiglu or geglu (the recipe's
// ffn_act); with post-norms or a residual scale, x += s · post_norm(ffn_down(...)) (add_branch).
void Context::Impl::ffn_block(const Pass& p, int layer) {
  const HParams& hp = w.hp;
  const detail::Layer& L = w.layers[static_cast<size_t>(layer)];
  const int D = hp.n_embd, F = hp.n_ff;
  const int64_t Ti = static_cast<int64_t>(p.T);
  float* xp = x.data();
  be::rmsnorm(xp, L.ffn_norm.data(), xb.data(), Ti, D, hp.rms_eps);
  matmul_stacked(p, xb.data(), L.w_gate_up, L.gate_up_parts, gu.data());
  if (!L.b_gate_up.empty()) be::add_bias(gu.data(), L.b_gate_up.data(), Ti, 2 * F);
  if (w.desc->ffn_act == arch::FfnActivation::GeluTanh)
    be::geglu_fused(gu.data(), hb.data(), Ti, F);
  else
    be::swiglu_fused(gu.data(), hb.data(), Ti, F);
  if (L.post_ffn_norm.empty() && hp.residual_scale == 0.0f) {  // straight into the residual stream
    matmul(p, hb.data(), L.w_down, xp, /*accumulate=*/true);
    if (!L.b_down.empty()) be::add_bias(xp, L.b_down.data(), Ti, D);
    return;
  }
  matmul(p, hb.data(), L.w_down, xb.data(), false);
  if (!L.b_down.empty()) be::add_bias(xb.data(), L.b_down.data(), Ti, D);
  add_branch(p, L.post_ffn_norm);
}

// logits = output_norm(x) · outputᵀ (output_logits), then divided by the logit
// scale (Granite) and soft-capped (Gemma 2) when the recipe sets them.
void Context::Impl::output_head(const Pass& p, int batch, int seq, Logits mode, std::span<float> logits_out) {
  output_logits(p, batch, seq, mode, logits_out);
  const size_t V = static_cast<size_t>(w.hp.n_vocab);
  for (size_t s = 0; s < seq_row.size(); ++s) {  // the rows output_logits wrote
    const size_t row = static_cast<size_t>(seq_row[s]);
    if (mode == Logits::Last)
      scale_logits(logits_out.data() + row * V, V);
    else
      scale_logits(logits_out.data() + row * seq * V, static_cast<size_t>(seq_len[s]) * V);
  }
}

void Context::Impl::scale_logits(float* logits, size_t n) const {
  const HParams& hp = w.hp;
  if (hp.logit_scale == 0.0f && hp.final_softcap == 0.0f) return;
  be::scale_softcap(logits, static_cast<int64_t>(n), hp.logit_scale != 0.0f ? 1.0f / hp.logit_scale : 1.0f,
                    hp.final_softcap);
}

// logits = output_norm(x) · outputᵀ at every valid position (Logits::All) or
// at each sequence's last one (Logits::Last), written to the rows' places.
void Context::Impl::output_logits(const Pass& p, int batch, int seq, Logits mode, std::span<float> logits_out) {
  const HParams& hp = w.hp;
  be::Engine& eng = *w.engine;
  const int D = hp.n_embd;
  const size_t V = static_cast<size_t>(hp.n_vocab), n_seq = seq_row.size();
  const int64_t Ti = static_cast<int64_t>(p.T);
  float* xp = x.data();
  if (mode == Logits::Last) {
    float* lastp = last.data();
    for (size_t s = 0; s < n_seq; ++s)
      std::memcpy(lastp + s * D, xp + static_cast<size_t>(seq_start[s] + seq_len[s] - 1) * D, sizeof(float) * D);
    be::rmsnorm(lastp, w.output_norm.data(), lastp, static_cast<int64_t>(n_seq), D, hp.rms_eps);
    if (n_seq == static_cast<size_t>(batch) && p.row_order) {
      be::matmul(eng, lastp, static_cast<int64_t>(n_seq), w.out_weight(), logits_out.data(), false, p.inv);
    } else {
      if (logits.reserve(n_seq * V)) ++stats.buffer_allocations;
      be::matmul(eng, lastp, static_cast<int64_t>(n_seq), w.out_weight(), logits.data(), false, p.inv);
      for (size_t s = 0; s < n_seq; ++s)
        std::memcpy(logits_out.data() + static_cast<size_t>(seq_row[s]) * V, logits.data() + s * V, sizeof(float) * V);
    }
    return;
  }
  be::rmsnorm(xp, w.output_norm.data(), xb.data(), Ti, D, hp.rms_eps);
  if (p.T == static_cast<size_t>(batch) * seq && p.row_order) {  // no padding: write in place
    be::matmul(eng, xb.data(), Ti, w.out_weight(), logits_out.data(), false, p.inv);
  } else {
    for (size_t s = 0; s < n_seq; ++s)
      be::matmul(eng, xb.data() + static_cast<size_t>(seq_start[s]) * D, seq_len[s], w.out_weight(),
                 logits_out.data() + static_cast<size_t>(seq_row[s]) * seq * V, false, p.inv);
  }
}

// The layer stack over the packed tokens (x holds the final hidden states);
// counts the pass. Returns false when no row has a token.
bool Context::Impl::run_layers(const Pass& p, std::span<const int32_t> tokens, int seq) {
  ++stats.forward_calls;
  if (p.cached) ++stats.forward_cached;
  if (cache.is_setup()) ++stats.forward_with_cache_setup;
  if (p.T == 0) return false;
  stats.tokens_processed += p.T;
  embed(p, tokens, seq);
  be::rope_table(pos.data(), static_cast<int64_t>(p.T), w.rope, rope_tab);  // angles once, not once per layer
  if (w.rope_swa_differs()) be::rope_table(pos.data(), static_cast<int64_t>(p.T), w.rope_swa, rope_tab_swa);
  for (int l = 0; l < w.hp.n_layer; ++l) {
    attention_block(p, l);
    ffn_block(p, l);
  }
  return true;
}

void Context::forward(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens, Logits mode,
                      std::span<float> logits_out) {
  Impl& im = *impl_;
  const size_t rows = mode == Logits::All ? static_cast<size_t>(batch) * static_cast<size_t>(std::max(seq, 0))
                                          : static_cast<size_t>(std::max(batch, 0));
  Impl::Pass p = im.check_pass(tokens, batch, seq, n_tokens, rows, logits_out);
  im.tree_for_seq.clear();
  im.pack_batch(p, batch, n_tokens);
  im.zero_padding(batch, seq, n_tokens, mode, logits_out);
  if (!im.run_layers(p, tokens, seq)) return;
  if (p.cached)
    for (size_t s = 0; s < im.seq_row.size(); ++s) im.cache.advance(im.seq_row[s], im.seq_len[s]);
  im.stats.logit_rows += mode == Logits::All ? p.T : im.seq_row.size();
  im.output_head(p, batch, seq, mode, logits_out);
}

}  // namespace kveval
