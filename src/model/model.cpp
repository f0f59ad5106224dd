// Model: the forward pass, the KV cache and the cache scopes (loading is in
// model_load.cpp, the architectures in model/arch/).
#include "model/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "model/model_impl.hpp"
#include "util/bf16.hpp"
#include "util/error.hpp"
#include "util/half.hpp"

namespace kveval {

namespace be = kveval::backend;

namespace {
/// The backend element type attention reads a cache of `d` as (d never Auto).
be::Dtype kv_view_dtype(KvCacheDtype d) {
  return d == KvCacheDtype::BF16 ? be::Dtype::BF16 : d == KvCacheDtype::F16 ? be::Dtype::F16 : be::Dtype::F32;
}
}  // namespace

Model::Model() : impl_(std::make_unique<Impl>()) {}
Model::~Model() = default;

const HParams& Model::hparams() const { return impl_->hp; }
const Tokenizer& Model::tokenizer() const { return *impl_->tok; }
const std::string& Model::path() const { return impl_->path; }
int Model::threads() const { return impl_->engine->threads(); }
size_t Model::weight_bytes() const { return impl_->weight_bytes; }
const LoadSummary& Model::load_summary() const { return impl_->summary; }
const std::string& Model::sha256() const { return impl_->sha256; }

size_t Model::activation_bytes_for(int rows, int seq, bool all_logits, int64_t tokens) const {
  const HParams& hp = impl_->hp;
  const size_t R = static_cast<size_t>(std::max(rows, 1)), S = static_cast<size_t>(std::max(seq, 1));
  const size_t T = tokens >= 0 ? static_cast<size_t>(tokens) : R * S, D = static_cast<size_t>(hp.n_embd), F = static_cast<size_t>(hp.n_ff);
  const size_t KV = static_cast<size_t>(impl_->kv_dim()), V = static_cast<size_t>(hp.n_vocab);
  const size_t group = static_cast<size_t>(hp.n_head / hp.n_head_kv);
  // Impl::reserve: x, xb, qkv, att, gu, hb, last; attention scores of the longest sequence;
  // the caller's logits; the last-position logits of a partial batch.
  const size_t Q = static_cast<size_t>(impl_->q_dim());
  size_t floats = T * (D + D + (Q + 2 * KV) + Q + 2 * F + F) + R * D + group * S * S;
  floats += all_logits ? R * S * V : 2 * R * V;
  return floats * sizeof(float) + T * 2 * sizeof(int32_t);
}
const ModelStats& Model::stats() const { return impl_->stats; }
uint64_t Model::primitives_created() const { return impl_->engine->primitives_created(); }
uint64_t Model::backend_allocations() const { return impl_->engine->buffer_allocations(); }
ComputeDtype Model::dtype() const { return impl_->dtype; }
const std::string& Model::dtype_note() const { return impl_->dtype_note; }

// ---- KV cache ---------------------------------------------------------------

size_t Model::cache_bytes_for(int batch_size, int max_seq_len) const {
  return 2 * impl_->cache_elems(batch_size, max_seq_len) * impl_->kv_elem_bytes();
}

KvCacheDtype Model::kv_cache_dtype() const { return impl_->kv_dtype; }

void Model::set_kv_cache_dtype(KvCacheDtype d) {
  if (caches_are_setup())
    throw CacheError(fmt::format("set_kv_cache_dtype {}: KV caches are set up; delete_caches first", to_string(d)));
  impl_->kv_dtype = resolve_kv_cache_dtype(d, impl_->dtype);
}

void Model::setup_caches(int batch_size, int max_seq_len) {
  auto& im = *impl_;
  if (batch_size < 1 || max_seq_len < 1)
    throw ArgumentError(fmt::format("setup_caches: batch_size {} and max_seq_len {} must be >= 1", batch_size, max_seq_len));
  if (max_seq_len > im.hp.n_ctx_train)
    throw ArgumentError(fmt::format("setup_caches: max_seq_len {} exceeds the model's context_length {}", max_seq_len,
                                    im.hp.n_ctx_train));
  if (!(im.k_cache && im.cache_batch == batch_size && im.cache_cap == max_seq_len)) {
    delete_caches();
    const size_t n = (im.cache_elems(batch_size, max_seq_len) * im.kv_elem_bytes() + sizeof(float) - 1) / sizeof(float);
    // No zero-fill: positions >= n_past are never read, so untouched pages stay
    // unmapped (4 KiB pages: PageBuffer refuses transparent huge pages).
    try {
      im.k_cache = be::PageBuffer::allocate(n);
      im.v_cache = be::PageBuffer::allocate(n);
    } catch (const std::bad_alloc&) {
      im.k_cache.reset();
      throw CacheError(fmt::format("setup_caches: cannot allocate {} bytes for a {} x {} KV cache",
                                   cache_bytes_for(batch_size, max_seq_len), batch_size, max_seq_len));
    }
    im.cache_batch = batch_size;
    im.cache_cap = max_seq_len;
    ++im.stats.cache_allocations;
  }
  im.n_past.assign(static_cast<size_t>(batch_size), 0);
  im.kv_row_overflows.assign(static_cast<size_t>(batch_size), 0);
  im.cache_enabled = true;
}

bool Model::caches_are_setup() const { return static_cast<bool>(impl_->k_cache); }
bool Model::caches_are_enabled() const { return impl_->cache_enabled; }

void Model::set_caches_enabled(bool enabled) {
  if (enabled && !caches_are_setup())
    throw CacheError("cannot enable KV caches: they are not set up; call setup_caches(batch_size, max_seq_len) first");
  impl_->cache_enabled = enabled;
}

void Model::reset_caches() {
  std::fill(impl_->n_past.begin(), impl_->n_past.end(), 0);
  std::fill(impl_->kv_row_overflows.begin(), impl_->kv_row_overflows.end(), 0);
}

void Model::reset_cache_row(int row) {
  if (row < 0 || row >= impl_->cache_batch)
    throw ArgumentError(fmt::format("reset_cache_row: row {} outside [0, {})", row, impl_->cache_batch));
  impl_->n_past[static_cast<size_t>(row)] = 0;
  impl_->kv_row_overflows[static_cast<size_t>(row)] = 0;
}

void Model::delete_caches() {
  auto& im = *impl_;
  im.k_cache.reset();
  im.v_cache.reset();
  im.cache_batch = 0;
  im.cache_cap = 0;
  im.cache_enabled = false;
  im.n_past.clear();
  im.kv_row_overflows.clear();
}

int Model::n_past(int row) const {
  if (row < 0 || row >= impl_->cache_batch)
    throw ArgumentError(fmt::format("n_past: row {} outside [0, {}) (caches {})", row, impl_->cache_batch,
                                    caches_are_setup() ? "set up" : "not set up"));
  return impl_->n_past[static_cast<size_t>(row)];
}
uint64_t Model::kv_f16_overflows(int row) const {
  if (row < 0 || row >= impl_->cache_batch)
    throw ArgumentError(fmt::format("kv_f16_overflows: row {} outside [0, {})", row, impl_->cache_batch));
  return impl_->kv_row_overflows[static_cast<size_t>(row)];
}
int Model::capacity() const { return impl_->cache_cap; }
int Model::cache_batch_size() const { return impl_->cache_batch; }
size_t Model::bytes() const { return caches_are_setup() ? cache_bytes_for(impl_->cache_batch, impl_->cache_cap) : 0; }
const float* Model::cache_data(int which) const {
  if (impl_->kv_dtype != KvCacheDtype::F32 && caches_are_setup())
    throw CacheError(fmt::format("cache_data: the KV cache holds {}, not f32", to_string(impl_->kv_dtype)));
  return which == 0 ? impl_->k_cache.get() : impl_->v_cache.get();
}

// ---- forward ----------------------------------------------------------------

void Model::forward(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens, Logits mode,
                    std::span<float> logits_out) {
  auto& im = *impl_;
  const HParams& hp = im.hp;
  if (batch < 1 || seq < 1 || tokens.size() != static_cast<size_t>(batch) * seq || n_tokens.size() != static_cast<size_t>(batch))
    throw ArgumentError(fmt::format("forward: tokens has {} ids and n_tokens {} rows for batch {} x seq {}", tokens.size(),
                                    n_tokens.size(), batch, seq));
  const size_t V = static_cast<size_t>(hp.n_vocab);
  const size_t need = (mode == Logits::All ? static_cast<size_t>(batch) * seq : static_cast<size_t>(batch)) * V;
  if (logits_out.size() < need)
    throw ArgumentError(fmt::format("forward: logits_out holds {} floats, {} needed", logits_out.size(), need));
  const bool cached = im.cache_enabled;
  if (cached && batch > im.cache_batch)
    throw CacheError(fmt::format("forward: batch {} exceeds the KV cache's batch size {}; call setup_caches with batch_size >= {}",
                                 batch, im.cache_batch, batch));
  // Pack the valid tokens of all rows: sequence s = row seq_row[s], tokens [seq_start[s], +seq_len[s]).
  im.seq_row.clear();
  im.seq_start.clear();
  im.seq_len.clear();
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
  const be::Dtype cdt = im.dtype == ComputeDtype::BF16 ? be::Dtype::BF16 : be::Dtype::F32;
  const bool split = cached && (im.dtype == ComputeDtype::F32 || im.dtype == ComputeDtype::BF16) &&
                     !be::matmul_rows_invariant(cdt) && be::decode_invariant_rows(cdt) > 0;
  size_t T = 0;
  int64_t Td = 0;  // split: tokens of the one-token sequences, packed first
  for (int r = 0; r < batch; ++r) {
    const int n = n_tokens[static_cast<size_t>(r)];
    if (n < 0 || n > seq) throw ArgumentError(fmt::format("forward: n_tokens[{}] = {} outside [0, {}]", r, n, seq));
    if (cached && im.n_past[static_cast<size_t>(r)] + n > im.cache_cap)
      throw CacheError(fmt::format("KV cache full: row {} holds {} of {} positions and {} more were written; "
                                   "set up caches with max_seq_len >= {}",
                                   r, im.n_past[static_cast<size_t>(r)], im.cache_cap, n, im.n_past[static_cast<size_t>(r)] + n));
  }
  for (int group = 0; group < (split ? 2 : 1); ++group)
    for (int r = 0; r < batch; ++r) {
      const int n = n_tokens[static_cast<size_t>(r)];
      if (n == 0 || (split && (n == 1) != (group == 0))) continue;
      im.seq_row.push_back(r);
      im.seq_start.push_back(static_cast<int>(T));
      im.seq_len.push_back(n);
      T += static_cast<size_t>(n);
      if (split && group == 0) ++Td;
    }
  const bool row_order = std::is_sorted(im.seq_row.begin(), im.seq_row.end());
  // Zero only what no matmul writes: padding positions and rows without tokens.
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
  ++im.stats.forward_calls;
  if (cached) ++im.stats.forward_cached;
  if (im.k_cache) ++im.stats.forward_with_cache_setup;
  if (T == 0) return;
  im.stats.tokens_processed += T;

  const int D = hp.n_embd, HD = hp.head_dim(), KV = im.kv_dim(), F = hp.n_ff, NQ = im.q_dim();
  const size_t n_seq = im.seq_row.size();
  im.reserve(T, n_seq);
  im.pos.resize(T);
  im.tok_ids.resize(T);
  for (size_t s = 0; s < n_seq; ++s) {
    const int r = im.seq_row[s];
    const int p0 = cached ? im.n_past[static_cast<size_t>(r)] : 0;
    for (int i = 0; i < im.seq_len[s]; ++i) {
      const int32_t id = tokens[static_cast<size_t>(r) * seq + i];
      if (id < 0 || id >= hp.n_vocab)
        throw ArgumentError(fmt::format("forward: token id {} at [{}, {}] outside [0, {})", id, r, i, hp.n_vocab));
      im.tok_ids[static_cast<size_t>(im.seq_start[s] + i)] = id;
      im.pos[static_cast<size_t>(im.seq_start[s] + i)] = p0 + i;
    }
  }
  float* x = im.x.data();
  for (size_t t = 0; t < T; ++t)
    std::memcpy(x + t * D, im.tok_embd.data() + static_cast<size_t>(im.tok_ids[t]) * D, sizeof(float) * D);

  be::Engine& eng = *im.engine;
  const int64_t Ti = static_cast<int64_t>(T);
  // Cache-free passes score log-likelihoods: make every row's result independent
  // of how requests were batched (bit-identical for batch_size 1 vs 8).
  const bool inv = !cached;
  // y[T, n_out] (+)= in[T, n_in] · Wᵀ for the pass's packed tokens.
  auto mm = [&](const float* in, const be::Weight& W, float* y, bool accumulate) {
    if (!split) return be::matmul(eng, in, Ti, W, y, accumulate, inv);
    if (Td > 0) be::matmul(eng, in, Td, W, y, accumulate, false);
    if (Ti > Td) be::matmul(eng, in + Td * W.n_in(), Ti - Td, W, y + Td * W.n_out(), accumulate, true);
  };
  be::rope_table(im.pos.data(), Ti, im.rope, im.rope_tab);  // angles once, not once per layer
  for (int l = 0; l < hp.n_layer; ++l) {
    const detail::Layer& L = im.layers[static_cast<size_t>(l)];
    be::rmsnorm(x, L.attn_norm.data(), im.xb.data(), Ti, D, hp.rms_eps);
    // qkv row t: [q (n_head x HD) | k (n_head_kv x HD) | v (n_head_kv x HD)]
    const int64_t QS = NQ + 2 * KV;
    float* q = im.qkv.data();
    float* k = q + NQ;
    float* v = k + KV;
    mm(im.xb.data(), L.wqkv, q, false);
    if (!L.bqkv.empty()) be::add_bias(q, L.bqkv.data(), Ti, QS);
    if (!L.q_norm.empty()) {  // per-head RMSNorm before RoPE (qwen3)
      be::rmsnorm_heads(q, L.q_norm.data(), Ti, hp.n_head, HD, QS, hp.rms_eps);
      be::rmsnorm_heads(k, L.k_norm.data(), Ti, hp.n_head_kv, HD, QS, hp.rms_eps);
    }
    be::rope(q, hp.n_head, HD, im.rope_tab, QS);
    be::rope(k, hp.n_head_kv, HD, im.rope_tab, QS);
    im.short_att.clear();
    for (size_t s = 0; s < n_seq; ++s) {
      const int r = im.seq_row[s];
      const size_t t0 = static_cast<size_t>(im.seq_start[s]);
      const int n = im.seq_len[s];
      be::KvView view;
      int64_t past = 0;
      if (cached) {
        past = im.n_past[static_cast<size_t>(r)];
        // Append K, V of the new tokens at positions [past, past + n).
        for (int h = 0; h < hp.n_head_kv; ++h) {
          char* kc = im.kv_at(0, im.cache_off(l, r, h));
          char* vc = im.kv_at(1, im.cache_off(l, r, h));
          for (int i = 0; i < n; ++i) {
            const float* ks = k + (t0 + i) * QS + h * HD;
            const float* vs = v + (t0 + i) * QS + h * HD;
            const size_t at = static_cast<size_t>(past + i) * HD;
            if (im.kv_dtype == KvCacheDtype::BF16) {
              util::f32_to_bf16_n(ks, reinterpret_cast<uint16_t*>(kc) + at, static_cast<size_t>(HD));
              util::f32_to_bf16_n(vs, reinterpret_cast<uint16_t*>(vc) + at, static_cast<size_t>(HD));
            } else if (im.kv_dtype == KvCacheDtype::F16) {  // |x| >= 65520: ±Inf, counted per row and in all
              const uint64_t over = util::f32_to_f16_n(ks, reinterpret_cast<uint16_t*>(kc) + at, static_cast<size_t>(HD)) +
                                    util::f32_to_f16_n(vs, reinterpret_cast<uint16_t*>(vc) + at, static_cast<size_t>(HD));
              im.stats.kv_f16_overflows += over;
              im.kv_row_overflows[static_cast<size_t>(r)] += over;
            } else {
              std::memcpy(reinterpret_cast<float*>(kc) + at, ks, sizeof(float) * HD);
              std::memcpy(reinterpret_cast<float*>(vc) + at, vs, sizeof(float) * HD);
            }
          }
        }
        view = {im.kv_at(0, im.cache_off(l, r, 0)), im.kv_at(1, im.cache_off(l, r, 0)), HD,
                static_cast<int64_t>(im.cache_cap) * HD, kv_view_dtype(im.kv_dtype)};
      } else {
        view = {k + t0 * QS, v + t0 * QS, QS, HD};
      }
      if (be::attention_uses_loop(n, past, HD))  // short blocks (decode steps): one parallel loop for all of them below
        im.short_att.push_back({q + t0 * QS, view, im.att.data() + t0 * NQ, n, past});
      else
        be::attention(eng, q + t0 * QS, view, im.att.data() + t0 * NQ, n, past, hp.n_head, hp.n_head_kv, HD, QS,
                      im.scores);
    }
    be::attention(im.short_att, hp.n_head, hp.n_head_kv, HD, QS);
    im.short_att.clear();
    mm(im.att.data(), L.wo, x, /*accumulate=*/true);
    if (!L.bo.empty()) be::add_bias(x, L.bo.data(), Ti, D);
    be::rmsnorm(x, L.ffn_norm.data(), im.xb.data(), Ti, D, hp.rms_eps);
    mm(im.xb.data(), L.w_gate_up, im.gu.data(), false);
    if (!L.b_gate_up.empty()) be::add_bias(im.gu.data(), L.b_gate_up.data(), Ti, 2 * F);
    be::swiglu_fused(im.gu.data(), im.hb.data(), Ti, F);
    mm(im.hb.data(), L.w_down, x, /*accumulate=*/true);
    if (!L.b_down.empty()) be::add_bias(x, L.b_down.data(), Ti, D);
  }
  if (cached)
    for (size_t s = 0; s < n_seq; ++s) im.n_past[static_cast<size_t>(im.seq_row[s])] += im.seq_len[s];

  if (mode == Logits::Last) {
    float* last = im.last.data();
    for (size_t s = 0; s < n_seq; ++s)
      std::memcpy(last + s * D, x + static_cast<size_t>(im.seq_start[s] + im.seq_len[s] - 1) * D, sizeof(float) * D);
    be::rmsnorm(last, im.output_norm.data(), last, static_cast<int64_t>(n_seq), D, hp.rms_eps);
    if (n_seq == static_cast<size_t>(batch) && row_order) {
      be::matmul(eng, last, static_cast<int64_t>(n_seq), im.out_weight(), logits_out.data(), false, inv);
    } else {
      if (im.logits.reserve(n_seq * V)) ++im.stats.buffer_allocations;
      be::matmul(eng, last, static_cast<int64_t>(n_seq), im.out_weight(), im.logits.data(), false, inv);
      for (size_t s = 0; s < n_seq; ++s)
        std::memcpy(logits_out.data() + static_cast<size_t>(im.seq_row[s]) * V, im.logits.data() + s * V, sizeof(float) * V);
    }
    return;
  }
  be::rmsnorm(x, im.output_norm.data(), im.xb.data(), Ti, D, hp.rms_eps);
  if (T == static_cast<size_t>(batch) * seq && row_order) {  // no padding: write in place
    be::matmul(eng, im.xb.data(), Ti, im.out_weight(), logits_out.data(), false, inv);
  } else {
    for (size_t s = 0; s < n_seq; ++s)
      be::matmul(eng, im.xb.data() + static_cast<size_t>(im.seq_start[s]) * D, im.seq_len[s], im.out_weight(),
                 logits_out.data() + static_cast<size_t>(im.seq_row[s]) * seq * V, false, inv);
  }
}

// ---- scopes -----------------------------------------------------------------

KvCacheScope::KvCacheScope(Model& model, int batch_size, int max_seq_len, CachePolicy policy)
    : model_(model), policy_(policy) {
  if (policy == CachePolicy::Release) {
    if (model.caches_are_setup())
      throw CacheError("KvCacheScope: KV caches are already set up; delete_caches() first or use CachePolicy::Reuse");
    model.setup_caches(batch_size, max_seq_len);
  } else {
    if (model.caches_are_setup() && model.cache_batch_size() == batch_size && model.capacity() == max_seq_len) {
      model.reset_caches();
      model.set_caches_enabled(true);
    } else {
      model.setup_caches(batch_size, max_seq_len);
    }
  }
}

KvCacheScope::~KvCacheScope() {
  model_.set_caches_enabled(false);
  if (policy_ == CachePolicy::Release)
    model_.delete_caches();
  else
    model_.reset_caches();
}

KvCacheDisabled::KvCacheDisabled(Model& model) : model_(model), was_enabled_(model.caches_are_enabled()) {
  if (!model.caches_are_setup())
    throw CacheError("KvCacheDisabled: KV caches are not set up; there is nothing to disable");
  model.set_caches_enabled(false);
}

KvCacheDisabled::~KvCacheDisabled() {
  if (model_.caches_are_setup()) model_.set_caches_enabled(was_enabled_);
}

}  // namespace kveval
