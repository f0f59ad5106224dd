#pragma once
// Model internals shared by the loader (model_load.cpp), the accessors
// (model.cpp) and the forward pass of a Context (context_impl.hpp). Not part
// of the public interface.
#include <memory>
#include <optional>
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
  backend::Weight wqkv;       // [n_q + 2 kv_dim, n_embd]: attn_q, attn_k, attn_v stacked (one matmul), or empty
  /// attn_q, attn_k, attn_v each in its own blocks when they are kept in different block types or read in place
  /// from the mapped file (file-block types; wqkv empty);
  /// their outputs go side by side as wqkv's would
  std::vector<backend::Weight> qkv_parts;
  std::vector<float> bqkv;    // [n_q + 2 kv_dim]: attn_q/k/v biases (zeros for a missing one), or empty
  std::vector<float> q_norm, k_norm;  // [head_dim]: per-head RMSNorm weights (qwen3), or empty
  backend::Weight wo;         // [n_embd, n_q]
  std::vector<float> bo;      // [n_embd] or empty
  backend::Weight w_gate_up;  // [2 n_ff, n_embd]: ffn_gate, ffn_up stacked (one matmul), or empty
  std::vector<backend::Weight> gate_up_parts;  // ffn_gate, ffn_up in their own block types (as qkv_parts)
  std::vector<float> b_gate_up;  // [2 n_ff] or empty
  backend::Weight w_down;     // [n_embd, n_ff]
  std::vector<float> b_down;  // [n_embd] or empty
  /// [n_embd]: RMSNorm weights of the attention and FFN outputs (NormPlacement::PreAndPost), or empty
  std::vector<float> post_attn_norm, post_ffn_norm;
};

/// What compute dtype `dtype` keeps as blocks (its kComputeDtypes row, through kveval::keeps): a matrix
/// of GGUF type t (token_embd aside) stays in its blocks, held as the backend dtype of t's kept-block
/// kernel (weight_dtype); `any` is false for a row that keeps none (f32, bf16, auto).
struct KeptBlocks {
  ComputeDtype dtype = ComputeDtype::F32;
  bool keeps(gguf::TensorType t) const { return kveval::keeps(dtype, t); }
  backend::Dtype weight_dtype(gguf::TensorType t) const { return *gguf::type_info(t).kept; }
  bool any() const {
    const ComputeDtypeInfo& row = compute_dtype_info(dtype);
    return row.kept.has_value() || row.keeps_kernel_types;
  }
};
inline KeptBlocks kept_blocks(ComputeDtype d) { return {d}; }

/// What the loader fills for token_embd and the output projection (Model::Impl's members of these names).
struct Embedding {
  std::vector<float>& tok_embd;
  backend::Weight& embd_blocks;
  backend::Weight& output;
  bool& embd_in_output;
};

/// The compute dtype `requested` resolves to for the file `f` on this CPU (resolve_dtype with what the file's
/// matrices are), and in `note` how it was chosen (Model::dtype_note). In load_dtype.cpp.
ComputeDtype choose_dtype(const gguf::File& f, ComputeDtype requested, std::string& note);

}  // namespace detail

struct Model::Impl {
  std::string path;
  HParams hp;
  const arch::Description* desc = nullptr;
  std::unique_ptr<Tokenizer> tok;
  std::unique_ptr<backend::Engine> engine;
  std::vector<float> tok_embd;  // [n_vocab, n_embd] F32 rows for the embedding lookup; empty when kept as blocks
  backend::Weight embd_blocks;  // token_embd in its own blocks (a kept type, untied output), else empty
  backend::Weight output;       // output projection [n_vocab, n_embd] (token_embd's blocks or a copy when tied)
  bool embd_in_output = false;  // tied output holding token_embd's kept blocks: the lookup reads `output`
  std::vector<float> output_norm;
  std::vector<detail::Layer> layers;
  std::vector<float> rope_factors;  // [n_rot/2] rope_freqs.weight, or empty
  backend::RopeParams rope;         // points into rope_factors
  backend::RopeParams rope_swa;     // the sliding layers' (another base or scale: Gemma 3), else equal to rope
  size_t weight_bytes = 0;
  int64_t max_part_rows = 0;  // most rows of a part in qkv_parts / gate_up_parts (0: every projection fused)
  LoadSummary summary;
  ComputeDtype dtype = ComputeDtype::F32;  ///< resolved compute dtype (never Auto)
  std::string dtype_note;                   ///< how it was chosen (Model::dtype_note)
  std::string sha256;  // of the file bytes loaded ("" when not requested)

  KvCacheDtype kv_dtype = KvCacheDtype::F32;  ///< a new Context's cache element type (never Auto)

  const backend::Weight& out_weight() const { return output; }
  /// The kept-block weight whose rows the embedding lookup decodes (backend::gather_rows), or nullptr when
  /// token_embd is held as F32 rows (tok_embd).
  const backend::Weight* embd_weight() const {
    return embd_in_output ? &output : embd_blocks.n_out() > 0 ? &embd_blocks : nullptr;
  }
  int kv_dim() const { return hp.n_head_kv * hp.head_dim(); }
  int q_dim() const { return hp.n_embd_q(); }
  /// Positions a query of `layer` sees (the recipe's sliding layers), or 0: all earlier ones.
  int sliding_window(int layer) const {
    return hp.sliding_window > 0 && (!desc->sliding_layer || desc->sliding_layer(layer)) ? hp.sliding_window : 0;
  }
  /// sliding_window(layer) of every layer (the KV cache's per-layer windows).
  std::vector<int> layer_windows() const {
    std::vector<int> w(static_cast<size_t>(hp.n_layer));
    for (int l = 0; l < hp.n_layer; ++l) w[static_cast<size_t>(l)] = sliding_window(l);
    return w;
  }
  /// Whether a matrix (a layer's projection or the output) is held in a block type MatmulMode::Int8 multiplies.
  bool has_int8_matrix() const {
    const auto int8 = [](const backend::Weight& w) { return w.n_out() > 0 && backend::int8_matmul_dtype(w.dtype()); };
    if (int8(output)) return true;
    for (const detail::Layer& L : layers) {
      for (const backend::Weight* w : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down})
        if (int8(*w)) return true;
      for (const auto* parts : {&L.qkv_parts, &L.gate_up_parts})
        for (const backend::Weight& w : *parts)
          if (int8(w)) return true;
    }
    return false;
  }
  /// Sets rope and rope_swa from hp and rope_factors (read first: they point into rope_factors). In model_load.cpp.
  void set_rope();
  /// Creates the engine (opts.threads, bf16 tiles, matmul mode opts.matmul where an int8 matrix exists) and fills
  /// summary from the file f, the weights read and opts (keep: the kept block types, mat_dtype: other matrices'
  /// type in memory; opts.n_ctx: the run's context, 0 = n_ctx_train; opts.map_weights: what was read in place).
  /// In model_load.cpp.
  void finish_load(const gguf::File& f, const ModelOptions& opts, detail::KeptBlocks keep, DType mat_dtype);
  /// Calls f(const backend::Weight&) on every matrix a forward pass multiplies: the output, then each layer's
  /// wqkv, wo, w_gate_up, w_down (those held) and the parts of its fused projections.
  template <class F>
  void for_each_matrix(F&& f) const {
    f(output);
    for (const detail::Layer& L : layers) {
      for (const backend::Weight* w : {&L.wqkv, &L.wo, &L.w_gate_up, &L.w_down})
        if (w->n_out() > 0) f(*w);
      for (const auto* parts : {&L.qkv_parts, &L.gate_up_parts})
        for (const backend::Weight& w : *parts) f(w);
    }
  }
  /// Bytes of the weights that view the file's mapping (backend::Weight::is_view), token_embd's once.
  uint64_t mapped_bytes() const {
    uint64_t n = embd_blocks.is_view() ? embd_blocks.bytes() : 0;
    for_each_matrix([&n](const backend::Weight& w) { n += w.is_view() ? w.bytes() : 0; });
    return n;
  }
  /// Whether sliding layers rotate with other angles than the global ones (rope_swa).
  bool rope_swa_differs() const {
    return hp.sliding_window > 0 && (rope_swa.freq_base != rope.freq_base || rope_swa.freq_scale != rope.freq_scale);
  }
};

}  // namespace kveval
