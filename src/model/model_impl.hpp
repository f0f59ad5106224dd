#pragma once
// Model internals shared by the loader (model_load.cpp) and the forward pass
// and cache (model.cpp). Not part of the public interface.
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"

namespace kveval {

namespace detail {

/// One transformer block, laid out for the forward pass. Optional parts are
/// empty vectors when the file has no such tensor.
struct Layer {
  std::vector<float> attn_norm, ffn_norm;  // [n_embd]
  backend::Weight wqkv;       // [n_q + 2 kv_dim, n_embd]: attn_q, attn_k, attn_v stacked (one matmul)
  std::vector<float> bqkv;    // [n_q + 2 kv_dim]: attn_q/k/v biases (zeros for a missing one), or empty
  std::vector<float> q_norm, k_norm;  // [head_dim]: per-head RMSNorm weights (qwen3), or empty
  backend::Weight wo;         // [n_embd, n_q]
  std::vector<float> bo;      // [n_embd] or empty
  backend::Weight w_gate_up;  // [2 n_ff, n_embd]: ffn_gate, ffn_up stacked (one matmul)
  std::vector<float> b_gate_up;  // [2 n_ff] or empty
  backend::Weight w_down;     // [n_embd, n_ff]
  std::vector<float> b_down;  // [n_embd] or empty
};

/// What compute dtype `d` keeps as blocks: the file's matrices (token_embd
/// aside) of GGUF type `type`, held as backend `dtype`; `keeps` is false for
/// F32, BF16 and Auto, which keep none.
struct KeptBlocks {
  bool keeps = false;
  gguf::TensorType type = gguf::TensorType::F32;
  backend::Dtype dtype = backend::Dtype::F32;
};
inline KeptBlocks kept_blocks(ComputeDtype d) {
  if (d == ComputeDtype::Q8_0) return {true, gguf::TensorType::Q8_0, backend::Dtype::Q8_0};
  if (d == ComputeDtype::Q4_0) return {true, gguf::TensorType::Q4_0, backend::Dtype::Q4_0};
  return {};
}

}  // namespace detail

struct Model::Impl {
  std::string path;
  HParams hp;
  const arch::Description* desc = nullptr;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<backend::Engine> engine;
  std::vector<float> tok_embd;  // [n_vocab, n_embd] rows for the embedding lookup
  backend::Weight output;       // output projection [n_vocab, n_embd] (a copy of token_embd when tied)
  std::vector<float> output_norm;
  std::vector<detail::Layer> layers;
  std::vector<float> rope_factors;  // [n_rot/2] rope_freqs.weight, or empty
  backend::RopeParams rope;         // points into rope_factors
  backend::RopeTable rope_tab;      // the current forward's RoPE angles, shared by all layers
  size_t weight_bytes = 0;
  LoadSummary summary;
  ComputeDtype dtype = ComputeDtype::F32;  ///< resolved compute dtype (never Auto)
  std::string dtype_note;                   ///< how it was chosen (Model::dtype_note)
  std::string sha256;  // of the file bytes loaded ("" when not requested)

  // ---- KV cache: K and V [n_layer][batch][n_kv_head][cap][head_dim] of kv_dtype ----
  backend::PageBuffer k_cache, v_cache;  // pages become resident when written (no huge pages)
  KvCacheDtype kv_dtype = KvCacheDtype::F32;  ///< F32, BF16 or F16, never Auto
  size_t kv_elem_bytes() const { return kv_dtype == KvCacheDtype::F32 ? 4 : 2; }
  /// Element `off` (cache_off units) of the K (which 0) or V cache.
  char* kv_at(int which, size_t off) const {
    return reinterpret_cast<char*>((which == 0 ? k_cache : v_cache).get()) + off * kv_elem_bytes();
  }
  int cache_batch = 0, cache_cap = 0;
  bool cache_enabled = false;
  std::vector<int> n_past;
  std::vector<uint64_t> kv_row_overflows;  ///< per row: K/V values stored as ±Inf by an f16 cache since its last reset

  ModelStats stats;

  // ---- activation buffers (grow-only) ----
  backend::Buffer x, xb, qkv, att, gu, hb, logits, last, scores;
  std::vector<int32_t> pos;       // [T]
  std::vector<int32_t> tok_ids;   // [T]
  std::vector<int> seq_row, seq_start, seq_len;  // packed sequences
  std::vector<backend::AttentionSeq> short_att;   // sequences of a layer attended in one parallel loop

  const backend::Weight& out_weight() const { return output; }
  int kv_dim() const { return hp.n_head_kv * hp.head_dim(); }
  int q_dim() const { return hp.n_embd_q(); }
  size_t cache_elems(int batch, int cap) const {
    return static_cast<size_t>(hp.n_layer) * batch * hp.n_head_kv * cap * hp.head_dim();
  }
  // Offset of (layer, row, head, pos=0) in a cache.
  size_t cache_off(int layer, int row, int head) const {
    return ((static_cast<size_t>(layer) * cache_batch + row) * hp.n_head_kv + head) * cache_cap * hp.head_dim();
  }

  void reserve(size_t T, size_t n_rows_last) {
    const size_t D = hp.n_embd, F = hp.n_ff, KV = kv_dim(), Q = q_dim();
    bool a = false;
    a |= x.reserve(T * D);
    a |= xb.reserve(T * D);
    a |= qkv.reserve(T * (Q + 2 * KV));
    a |= att.reserve(T * Q);
    a |= gu.reserve(T * 2 * F);
    a |= hb.reserve(T * F);
    a |= last.reserve(std::max<size_t>(1, n_rows_last) * D);
    if (a) ++stats.buffer_allocations;
  }
};

}  // namespace kveval
