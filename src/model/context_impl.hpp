#pragma once
// Context internals shared by the cache API (context.cpp) and the forward pass
// (forward.cpp). Not part of the public interface.
#include <algorithm>
#include <span>
#include <vector>

#include "backend/backend.hpp"
#include "model/context.hpp"
#include "model/kv_cache.hpp"
#include "model/model_impl.hpp"

namespace kveval {

struct Context::Impl {
  explicit Impl(const Model& m)
      : model(m),
        w(*m.impl_),
        cache(m.impl_->hp.n_layer, m.impl_->hp.n_head_kv, m.impl_->hp.head_dim(), m.impl_->kv_dtype,
              m.impl_->layer_windows()) {}

  const Model& model;
  const Model::Impl& w;  ///< the weights and the shared engine
  KvCache cache;
  bool cache_enabled = false;
  ContextStats stats;

  // ---- activation buffers (grow-only) ----
  backend::Buffer x, xb, qkv, att, gu, hb, logits, last, scores;
  backend::Buffer part_out;       // one part's product of a projection kept as parts [T, part rows]
  backend::RopeTable rope_tab;    // the current forward's RoPE angles, shared by all layers
  backend::RopeTable rope_tab_swa;  // the sliding layers' angles when they differ (Model::Impl::rope_swa)
  std::vector<int32_t> pos;       // [T]
  std::vector<int32_t> tok_ids;   // [T]
  std::vector<int> seq_row, seq_start, seq_len;  // packed sequences
  std::vector<backend::AttentionSeq> short_att;   // sequences of a layer attended in one parallel loop
  // forward_rows' token trees: tree_for_seq[s] indexes trees (-1: a causal sequence; empty: none at all)
  std::vector<int> tree_for_seq;
  size_t n_rows = 0;  // rows of the current forward_rows batch
  std::vector<backend::TreeMask> trees;
  std::vector<std::vector<int64_t>> tree_parent, tree_pos;  // trees[i].parent's and .pos's storage

  /// The tree mask of packed sequence s, or nullptr.
  const backend::TreeMask* seq_tree(size_t s) const {
    if (s >= tree_for_seq.size() || tree_for_seq[s] < 0) return nullptr;
    return &trees[static_cast<size_t>(tree_for_seq[s])];
  }

  /// What one forward pass decided while packing its batch.
  struct Pass {
    bool cached = false;     ///< reads and appends the KV cache
    bool split = false;      ///< one-token sequences packed first and multiplied apart (see pack_batch)
    bool inv = false;        ///< batch-invariant matmuls (cache-free passes)
    bool row_order = false;  ///< the packed sequences are in row order
    size_t T = 0;            ///< valid tokens packed
    int64_t Td = 0;          ///< split: tokens of the one-token sequences, packed first
  };

  void reserve(size_t T, size_t n_rows_last) {
    const HParams& hp = w.hp;
    const size_t D = hp.n_embd, F = hp.n_ff, KV = w.kv_dim(), Q = w.q_dim();
    bool a = false;
    a |= x.reserve(T * D);
    a |= xb.reserve(T * D);
    a |= qkv.reserve(T * (Q + 2 * KV));
    a |= att.reserve(T * Q);
    a |= gu.reserve(T * 2 * F);
    a |= hb.reserve(T * F);
    a |= last.reserve(std::max<size_t>(1, n_rows_last) * D);
    if (w.max_part_rows > 0) a |= part_out.reserve(T * static_cast<size_t>(w.max_part_rows));
    if (a) ++stats.buffer_allocations;
  }

  // The forward pass in named steps (forward.cpp), in the order Context::forward runs them.
  Pass check_pass(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens,
                  size_t logit_rows, std::span<float> logits_out) const;
  void set_trees(std::span<const TokenTree> in, std::span<const int> n_tokens);
  bool run_layers(const Pass& p, std::span<const int32_t> tokens, int seq);
  void output_rows(const Pass& p, std::span<const LogitRow> at, std::span<float> logits_out);
  void pack_batch(Pass& p, int batch, std::span<const int> n_tokens);
  void zero_padding(int batch, int seq, std::span<const int> n_tokens, Logits mode, std::span<float> logits_out) const;
  void embed(const Pass& p, std::span<const int32_t> tokens, int seq);
  void matmul(const Pass& p, const float* in, const backend::Weight& W, float* y, bool accumulate);
  void matmul_stacked(const Pass& p, const float* in, const backend::Weight& W, std::span<const backend::Weight> parts,
                      float* y);
  void attention_block(const Pass& p, int layer);
  void attend(const Pass& p, int layer, float* q, float* k, float* v);
  void attend_blocks(int layer, int row, const float* q, const float* k, const float* v, float* out, int n,
                     int64_t past, const backend::AttentionOptions& opts);
  void ffn_block(const Pass& p, int layer);
  void add_branch(const Pass& p, const std::vector<float>& post_norm);
  void output_head(const Pass& p, int batch, int seq, Logits mode, std::span<float> logits_out);
  /// The recipe's logit scale (divide by logit_scale) and final soft-cap on `n` logits, in place; nothing
  /// when the architecture has neither.
  void scale_logits(float* logits, size_t n) const;
  void output_logits(const Pass& p, int batch, int seq, Logits mode, std::span<float> logits_out);
};

}  // namespace kveval
