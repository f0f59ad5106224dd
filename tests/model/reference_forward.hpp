#pragma once
// A naive double-precision forward pass of a Llama-like GGUF model, written
// from the formulas and read with gguf::File only (no Model code): the
// reference the engine's logits and KV cache are checked against.
//
// The architecture description (arch::Description: RoPE layout, which
// biases, Q/K norms, rope_freqs) says which tensors to read and which steps
// apply; the GGUF gives the weights and hyper-parameters. One forward is four
// separate steps, each a function below:
//   embed            token_embd rows
//   attention_block  RMSNorm, Q/K/V (+ biases), Q/K norms, RoPE, causal GQA
//                    softmax(q k / sqrt(head_dim)) v, output projection, residual
//   ffn_block        RMSNorm, SwiGLU gate/up (+ biases), down (+ bias), residual
//   output_head      output_norm, output (tied to token_embd when absent)
// Formulas: RMSNorm (Zhang & Sennrich 2019); RoPE (Su et al. 2021) with
// ggml's rope_norm / rope_neox pairing and llama.cpp's linear scaling and
// rope_freqs divisors; SwiGLU (Shazeer 2020). Gemma 2 (llama.cpp
// src/models/gemma2.cpp, written out here independently of the recipe's
// numbers): embeddings times sqrt(n_embd), queries times 1 / sqrt(head_dim),
// scores soft-capped c tanh(s / c), even layers see the last `window`
// positions, RMSNorm of each branch before the residual add, GELU(tanh)
// gating (GeGLU), logits soft-capped. Gemma 3 (src/models/gemma3.cpp): the
// same without the attention soft-cap (final soft-cap only when the file has
// it), Q/K head norms, 5 of every 6 layers sliding when the file has a window,
// rotating with rope.freq_base_swa (default 10000) and no linear scaling.
// Granite (src/models/granite.cpp, build_inp_embd): embeddings times
// embedding_scale, each branch times residual_scale before its add, scores
// times attention.scale, logits divided by logit_scale (absent keys: off).
// Phi-3 (src/models/phi3.cpp): Q/K/V rows of the fused attn_qkv in that order,
// ffn_up's first n_ff rows the gate, NEOX RoPE over rope.dimension_count
// dimensions (the rest unrotated), LongRoPE: rope_factors_long when the context
// given to the constructor exceeds rope.scaling.original_context_length, else
// rope_factors_short, divisors of each pair's frequency, and cos / sin times
// rope.scaling.attn_factor (ggml_rope_ext's mscale); attention.sliding_window
// > 0 on every layer (Hugging Face's Phi3 attention).
//
// Ablation leaves one feature out, for negative controls showing that a
// comparison against this reference can fail.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <string>
#include <utility>
#include <vector>

#include "model/arch/arch.hpp"
#include "model/gguf.hpp"

namespace kveval::test {

/// Features the reference can leave out (negative controls).
struct Ablation {
  bool swap_rope_style = false;
  bool no_bias = false;
  bool no_qk_norm = false;
  bool no_rope_factors = false;
  bool no_linear_scale = false;
  bool no_softcap = false;  ///< neither attention nor final soft-cap
  bool no_window = false;   ///< every layer sees every earlier position
  bool no_embd_scale = false, no_residual_scale = false, no_attn_scale = false, no_logit_scale = false;  ///< Granite
  bool other_longrope_set = false;  ///< Phi-3: the LongRoPE factor set the context does not pick
  bool no_rope_attn_factor = false; ///< Phi-3: cos and sin unscaled
  bool swap_gate_up = false;        ///< Phi-3: the fused ffn_up's halves taken the other way round
};

/// A GGUF model's weights in double and its forward pass.
class ReferenceModel {
 public:
  using Rows = std::vector<std::vector<double>>;  ///< [T][n]: one vector per position

  /// The weights of the GGUF at `path`, for the architecture named by its general.architecture.
  explicit ReferenceModel(const std::string& path) : ReferenceModel(path, description_of(path)) {}
  /// The weights of the GGUF at `path` read as architecture `desc`.
  ReferenceModel(const std::string& path, const arch::Description& desc) : desc_(desc) { load(path); }
  /// The weights of the GGUF at `path` for a run of context `n_ctx` (LongRoPE's choice; 0 = context_length).
  ReferenceModel(const std::string& path, int n_ctx) : desc_(description_of(path)), n_ctx_(n_ctx) { load(path); }

  const arch::Description& desc() const { return desc_; }
  int n_embd = 0, n_layer = 0, n_head = 0, n_head_kv = 0, head_dim = 0, n_ff = 0, n_vocab = 0, n_rot = 0;
  double eps = 0, freq_base = 0, freq_scale = 1;
  // Gemma 2: 0 = off
  double embd_scale = 0, attn_scale = 0, attn_softcap = 0, final_softcap = 0;
  double base_swa = 0, scale_swa = 1;  ///< RoPE of the sliding layers
  int window = 0, swa_period = 0;      ///< layer l slides when l % swa_period < swa_period - 1 (every layer: 1)
  bool gemma = false;  ///< post-norms and GeGLU
  double residual_scale = 0, logit_scale = 0;  ///< Granite: 0 = off
  double rope_attn_factor = 1;                 ///< Phi-3 LongRoPE
  int n_ctx_orig = 0;                          ///< Phi-3: rope.scaling.original_context_length
  std::string longrope_set;                    ///< Phi-3: "long", "short" or "" (no factors)

  /// Logits [T][n_vocab] of the sequence `ids` at positions 0..T-1.
  Rows logits(const std::vector<int32_t>& ids, const Ablation& ab = {}) const {
    Rows x = embed(ids, ab);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const bool slides = window > 0 && (swa_period == 1 || int(l) % swa_period < swa_period - 1);
      attention_block(layers_[l], x, ab, slides && !ab.no_window ? window : 0, slides);
      ffn_block(layers_[l], x, ab);
    }
    return output_head(x, ab);
  }
  /// The same logits as one row-major vector [T * n_vocab].
  std::vector<double> flat_logits(const std::vector<int32_t>& ids, const Ablation& ab = {}) const {
    std::vector<double> out;
    out.reserve(ids.size() * size_t(n_vocab));
    for (const auto& row : logits(ids, ab)) out.insert(out.end(), row.begin(), row.end());
    return out;
  }
  /// Layer-0 key (after Q/K norm and RoPE at absolute position `pos`) and value of token `tok`,
  /// [n_head_kv * head_dim] each: what the KV cache holds for that position.
  std::pair<std::vector<double>, std::vector<double>> layer0_kv(int32_t tok, int pos) const {
    const Layer& L = layers_.at(0);
    std::vector<double> h = embed({tok})[0];
    rmsnorm(h, 0, h.size(), L.attn_norm);
    std::vector<double> k = linear(L.wk, h, L.bk, true);
    norm_and_rope_heads(k, n_head_kv, L.k_norm, pos, {});
    return {std::move(k), linear(L.wv, h, L.bv, true)};
  }

 private:
  struct Layer {
    std::vector<double> attn_norm, wq, wk, wv, wo, bq, bk, bv, bo, q_norm, k_norm;  // weights [n_out][n_in]
    std::vector<double> ffn_norm, wg, wu, wd, bg, bu, bd;
    std::vector<double> post_attn_norm, post_ffn_norm;  // [n_embd] (gemma2) or empty
  };
  const arch::Description& desc_;
  int n_ctx_ = 0;                     // the run's context (LongRoPE), 0 = context_length
  std::vector<double> rope_factors_;  // [n_rot/2] or empty
  std::vector<double> other_factors_; // Phi-3: the LongRoPE set not picked
  std::vector<double> tok_embd_, output_, output_norm_;
  std::vector<Layer> layers_;

  static const arch::Description& description_of(const std::string& path) {
    const std::string name = gguf::File(path).get_string("general.architecture");
    const arch::Description* d = arch::find(name);
    REQUIRE_MESSAGE(d != nullptr, "reference: no architecture description for '" << name << "'");
    return *d;
  }

  void load(const std::string& path) {
    gguf::File f(path);
    const std::string a(desc_.name);
    auto k = [&](const char* s) { return a + "." + s; };
    n_embd = static_cast<int>(f.get_uint(k("embedding_length")));
    n_layer = static_cast<int>(f.get_uint(k("block_count")));
    n_head = static_cast<int>(f.get_uint(k("attention.head_count")));
    n_head_kv = static_cast<int>(f.get_uint(k("attention.head_count_kv")));
    head_dim = static_cast<int>(f.get_uint_or(k("attention.key_length"), static_cast<uint64_t>(n_embd / n_head)));
    n_rot = static_cast<int>(f.get_uint_or(k("rope.dimension_count"), static_cast<uint64_t>(head_dim)));
    n_ff = static_cast<int>(f.get_uint(k("feed_forward_length")));
    eps = f.get_float(k("attention.layer_norm_rms_epsilon"));
    freq_base = f.get_float_or(k("rope.freq_base"), 10000.0);
    gemma = a == "gemma2" || a == "gemma3";
    const bool g2 = a == "gemma2";
    if (gemma) {  // llama.cpp: the 27B (46 / 62 layers) scales by n_embd / n_head instead of head_dim
      embd_scale = std::sqrt(static_cast<double>(n_embd));
      attn_scale = 1.0 / std::sqrt(static_cast<double>(n_layer == (g2 ? 46 : 62) ? n_embd / n_head : head_dim));
      attn_softcap = g2 ? f.get_float(k("attn_logit_softcapping")) : 0.0;
      final_softcap = g2 ? f.get_float(k("final_logit_softcapping")) : f.get_float_or(k("final_logit_softcapping"), 0.0);
      window = static_cast<int>(f.get_uint_or(k("attention.sliding_window"), g2 ? 4096 : 0));
      swa_period = window == 0 ? 1 : g2 ? 2 : 6;
      base_swa = f.get_float_or(k("rope.freq_base_swa"), g2 ? f.get_float_or(k("rope.freq_base"), 10000.0) : 10000.0);
    }
    if (a == "granite") {
      embd_scale = f.get_float_or(k("embedding_scale"), 0.0);
      residual_scale = f.get_float_or(k("residual_scale"), 0.0);
      attn_scale = f.get_float_or(k("attention.scale"), 0.0);
      logit_scale = f.get_float(k("logit_scale"));
    }
    if (a == "phi3") {
      window = static_cast<int>(f.get_uint_or(k("attention.sliding_window"), 0));
      swa_period = 1;
      base_swa = freq_base;
      rope_attn_factor = f.get_float_or(k("rope.scaling.attn_factor"), 1.0);
      n_ctx_orig = static_cast<int>(f.get_uint_or(k("rope.scaling.original_context_length"), f.get_uint(k("context_length"))));
    }
    if (f.get_string_or(k("rope.scaling.type"), "linear") == "linear") {
      const double factor = f.get_float_or(k("rope.scaling.factor"), 0.0);
      freq_scale = factor > 0 ? 1.0 / factor : 1.0;
    }
    scale_swa = a == "gemma3" ? 1.0 : freq_scale;
    const int n_ctx = n_ctx_ > 0 ? n_ctx_ : static_cast<int>(f.get_uint(k("context_length")));
    auto get = [&](const std::string& name, std::vector<uint64_t> dims) {
      const auto v = f.tensor_f32(name, dims);
      return std::vector<double>(v.begin(), v.end());
    };
    // A tensor the description allows is read when the file has it; one it excludes is never read.
    auto opt = [&](arch::Presence p, const std::string& name, std::vector<uint64_t> dims) {
      return p != arch::Presence::Absent && f.find_tensor(name) ? get(name, dims) : std::vector<double>{};
    };
    const uint64_t E = n_embd, Q = uint64_t(n_head) * head_dim, KV = uint64_t(n_head_kv) * head_dim, F = n_ff,
                   HD = head_dim;
    n_vocab = static_cast<int>(f.tensor(arch::kTokenEmbd).dims[1]);
    const uint64_t V = n_vocab;
    tok_embd_ = get(std::string(arch::kTokenEmbd), {E, V});
    output_ = f.find_tensor(arch::kOutput) ? get(std::string(arch::kOutput), {E, V}) : tok_embd_;
    output_norm_ = get(std::string(arch::kOutputNorm), {E});
    rope_factors_ = opt(desc_.rope_freqs, std::string(arch::kRopeFreqs), {uint64_t(n_rot / 2)});
    if (a == "phi3" && f.find_tensor(arch::kRopeFactorsLong)) {  // llama.cpp get_rope_factors
      const bool use_long = n_ctx > n_ctx_orig;
      longrope_set = use_long ? "long" : "short";
      const std::string l(arch::kRopeFactorsLong), sh(arch::kRopeFactorsShort);
      rope_factors_ = get(use_long ? l : sh, {uint64_t(n_rot / 2)});
      other_factors_ = get(use_long ? sh : l, {uint64_t(n_rot / 2)});
    }
    const bool fused = a == "phi3";
    for (int l = 0; l < n_layer; ++l) {
      auto t = [&](const char* base, const char* kind = "weight") { return arch::blk_tensor(l, base, kind); };
      Layer L;
      L.attn_norm = get(t("attn_norm"), {E});
      if (fused) {  // attn_qkv rows: Q, then K, then V
        const std::vector<double> qkv = get(t("attn_qkv"), {E, Q + 2 * KV});
        L.wq.assign(qkv.begin(), qkv.begin() + long(Q * E));
        L.wk.assign(qkv.begin() + long(Q * E), qkv.begin() + long((Q + KV) * E));
        L.wv.assign(qkv.begin() + long((Q + KV) * E), qkv.end());
      } else {
        L.wq = get(t("attn_q"), {E, Q});
        L.wk = get(t("attn_k"), {E, KV});
        L.wv = get(t("attn_v"), {E, KV});
      }
      L.wo = get(t("attn_output"), {Q, E});
      L.bq = opt(desc_.qkv_bias, t("attn_q", "bias"), {Q});
      L.bk = opt(desc_.qkv_bias, t("attn_k", "bias"), {KV});
      L.bv = opt(desc_.qkv_bias, t("attn_v", "bias"), {KV});
      L.bo = opt(desc_.out_bias, t("attn_output", "bias"), {E});
      L.q_norm = opt(desc_.qk_norm, t("attn_q_norm"), {HD});
      L.k_norm = opt(desc_.qk_norm, t("attn_k_norm"), {HD});
      L.ffn_norm = get(t("ffn_norm"), {E});
      if (fused) {  // ffn_up rows: the gate's n_ff, then the up projection's
        const std::vector<double> gu = get(t("ffn_up"), {E, 2 * F});
        L.wg.assign(gu.begin(), gu.begin() + long(F * E));
        L.wu.assign(gu.begin() + long(F * E), gu.end());
      } else {
        L.wg = get(t("ffn_gate"), {E, F});
        L.wu = get(t("ffn_up"), {E, F});
      }
      L.wd = get(t("ffn_down"), {F, E});
      L.bg = opt(desc_.ffn_bias, t("ffn_gate", "bias"), {F});
      L.bu = opt(desc_.ffn_bias, t("ffn_up", "bias"), {F});
      L.bd = opt(desc_.ffn_bias, t("ffn_down", "bias"), {E});
      if (gemma) {
        L.post_attn_norm = get(t("post_attention_norm"), {E});
        L.post_ffn_norm = get(t("post_ffw_norm"), {E});
      }
      layers_.push_back(std::move(L));
    }
  }

  // ---- the formulas ---------------------------------------------------------

  /// y[o] = sum_i W[o, i] x[i] (+ b[o]); W is GGUF {n_in, n_out}: n_out rows of n_in.
  static std::vector<double> linear(const std::vector<double>& W, const std::vector<double>& x,
                                    const std::vector<double>& b, bool use_bias) {
    const size_t n_in = x.size(), n_out = W.size() / n_in;
    std::vector<double> y(n_out, 0.0);
    for (size_t o = 0; o < n_out; ++o) {
      double s = 0;
      for (size_t i = 0; i < n_in; ++i) s += W[o * n_in + i] * x[i];
      y[o] = s + (use_bias && !b.empty() ? b[o] : 0.0);
    }
    return y;
  }
  /// RMSNorm of x[off, off + n) in place, times w.
  void rmsnorm(std::vector<double>& x, size_t off, size_t n, const std::vector<double>& w) const {
    double ss = 0;
    for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (size_t i = 0; i < n; ++i) x[off + i] = x[off + i] * s * w[i];
  }
  /// RoPE of one head at position pos: pair i rotated by pos * base^(-2i/n_rot) * scale / factor_i;
  /// Normal pairs (2i, 2i+1), Neox pairs (i, i + n_rot/2); dimensions from n_rot on are not rotated.
  /// A sliding layer (`local`) rotates with base_swa and scale_swa.
  void rope(double* v, int pos, const Ablation& ab, bool local) const {
    const bool neox = (desc_.rope == arch::RopeStyle::Neox) != ab.swap_rope_style;
    for (int i = 0; i < n_rot / 2; ++i) {
      double th = pos * std::pow(local ? base_swa : freq_base, -2.0 * i / n_rot);
      if (!ab.no_linear_scale) th *= local ? scale_swa : freq_scale;
      const std::vector<double>& factors = ab.other_longrope_set ? other_factors_ : rope_factors_;
      if (!factors.empty() && !ab.no_rope_factors) th /= factors[size_t(i)];
      const double m = ab.no_rope_attn_factor ? 1.0 : rope_attn_factor;  // ggml_rope_ext: cos, sin times attn_factor
      const int a = neox ? i : 2 * i, b = neox ? i + n_rot / 2 : 2 * i + 1;
      const double x0 = v[a], x1 = v[b], c = m * std::cos(th), sn = m * std::sin(th);
      v[a] = x0 * c - x1 * sn;
      v[b] = x0 * sn + x1 * c;
    }
  }
  /// Per head of `v` ([n_heads][head_dim]): the Q/K norm (when the layer has one), then RoPE at `pos`.
  void norm_and_rope_heads(std::vector<double>& v, int n_heads, const std::vector<double>& norm, int pos,
                           const Ablation& ab, bool local = false) const {
    const size_t HD = size_t(head_dim);
    for (int h = 0; h < n_heads; ++h) {
      if (!norm.empty() && !ab.no_qk_norm) rmsnorm(v, size_t(h) * HD, HD, norm);
      rope(v.data() + size_t(h) * HD, pos, ab, local);
    }
  }

  /// Granite's residual_scale (1 when off).
  double branch_scale(const Ablation& ab) const { return residual_scale != 0 && !ab.no_residual_scale ? residual_scale : 1.0; }

  // ---- the steps ------------------------------------------------------------

  /// Rows of token_embd for `ids`: [T][n_embd].
  Rows embed(const std::vector<int32_t>& ids, const Ablation& ab = {}) const {
    const size_t E = size_t(n_embd);
    Rows x(ids.size());
    for (size_t t = 0; t < ids.size(); ++t) {
      x[t].assign(tok_embd_.begin() + long(ids[t]) * long(E), tok_embd_.begin() + long(ids[t] + 1) * long(E));
      if (embd_scale != 0 && !ab.no_embd_scale)
        for (double& e : x[t]) e *= embd_scale;
    }
    return x;
  }

  /// x[t] += attn_output(causal GQA attention of RMSNorm(x)) for every position t (post-normed
  /// when the layer has a post-norm); win > 0: query t sees positions (t - win, t]; a
  /// sliding (`local`) layer rotates with the sliding layers' RoPE.
  void attention_block(const Layer& L, Rows& x, const Ablation& ab, int win, bool local) const {
    const size_t T = x.size(), HD = size_t(head_dim), Q = size_t(n_head) * HD;
    const bool bias = !ab.no_bias;
    Rows q(T), k(T), v(T);
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> h = x[t];
      rmsnorm(h, 0, h.size(), L.attn_norm);
      q[t] = linear(L.wq, h, L.bq, bias);
      k[t] = linear(L.wk, h, L.bk, bias);
      v[t] = linear(L.wv, h, L.bv, bias);
      norm_and_rope_heads(q[t], n_head, L.q_norm, static_cast<int>(t), ab, local);
      norm_and_rope_heads(k[t], n_head_kv, L.k_norm, static_cast<int>(t), ab, local);
    }
    const int group = n_head / n_head_kv;
    for (size_t t = 0; t < T; ++t) {
      std::vector<double> att(Q, 0.0);
      for (int hh = 0; hh < n_head; ++hh) {
        const size_t kh = size_t(hh / group) * HD, qh = size_t(hh) * HD;
        std::vector<double> s(t + 1, -INFINITY);
        double mx = -1e300;
        const size_t first = win > 0 && t + 1 > size_t(win) ? t + 1 - size_t(win) : 0;
        for (size_t p = first; p <= t; ++p) {
          double d = 0;
          for (size_t i = 0; i < HD; ++i) d += q[t][qh + i] * k[p][kh + i];
          s[p] = d * (attn_scale != 0 && !ab.no_attn_scale ? attn_scale : 1.0 / std::sqrt(static_cast<double>(HD)));
          if (attn_softcap != 0 && !ab.no_softcap) s[p] = attn_softcap * std::tanh(s[p] / attn_softcap);
          mx = std::max(mx, s[p]);
        }
        double z = 0;
        for (auto& e : s) z += (e = std::exp(e - mx));
        for (size_t p = 0; p <= t; ++p)
          for (size_t i = 0; i < HD; ++i) att[qh + i] += s[p] / z * v[p][kh + i];
      }
      auto o = linear(L.wo, att, L.bo, bias);
      if (!L.post_attn_norm.empty()) rmsnorm(o, 0, o.size(), L.post_attn_norm);
      for (size_t i = 0; i < o.size(); ++i) x[t][i] += branch_scale(ab) * o[i];
    }
  }

  /// x[t] += ffn_down(silu(ffn_gate(h)) * ffn_up(h)) with h = RMSNorm(x[t]), for every position t;
  /// Gemma: gelu_tanh(g) = 0.5 g (1 + tanh(sqrt(2 / pi) (g + 0.044715 g^3))) instead of silu, output post-normed.
  void ffn_block(const Layer& L, Rows& x, const Ablation& ab) const {
    const bool bias = !ab.no_bias;
    for (auto& xt : x) {
      std::vector<double> h = xt;
      rmsnorm(h, 0, h.size(), L.ffn_norm);
      const auto g0 = linear(L.wg, h, L.bg, bias), u0 = linear(L.wu, h, L.bu, bias);
      const auto& g = ab.swap_gate_up ? u0 : g0;
      const auto& u = ab.swap_gate_up ? g0 : u0;
      std::vector<double> a(g.size());
      for (size_t i = 0; i < g.size(); ++i)
        a[i] = gemma ? 0.5 * g[i] * (1.0 + std::tanh(std::sqrt(2.0 / std::numbers::pi) * (g[i] + 0.044715 * g[i] * g[i] * g[i]))) * u[i]
                     : g[i] / (1.0 + std::exp(-g[i])) * u[i];  // GeGLU / SwiGLU
      auto d = linear(L.wd, a, L.bd, bias);
      if (!L.post_ffn_norm.empty()) rmsnorm(d, 0, d.size(), L.post_ffn_norm);
      for (size_t i = 0; i < d.size(); ++i) xt[i] += branch_scale(ab) * d[i];
    }
  }

  /// output(RMSNorm(x[t])) for every position t (soft-capped when the model has a final soft-cap): [T][n_vocab].
  Rows output_head(const Rows& x, const Ablation& ab) const {
    Rows out(x.size());
    for (size_t t = 0; t < x.size(); ++t) {
      std::vector<double> h = x[t];
      rmsnorm(h, 0, h.size(), output_norm_);
      out[t] = linear(output_, h, {}, false);
      if (logit_scale != 0 && !ab.no_logit_scale)
        for (double& l : out[t]) l /= logit_scale;
      if (final_softcap != 0 && !ab.no_softcap)
        for (double& l : out[t]) l = final_softcap * std::tanh(l / final_softcap);
    }
    return out;
  }
};

/// The test token sequence of length n over a vocabulary of V: (7919 (i + 3)) mod V.
inline std::vector<int32_t> token_ids(size_t n, int V) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((7919ll * (i + 3)) % V));
  return ids;
}

/// log_softmax of each of `rows` rows of `logits` [rows, V], in double, flattened.
inline std::vector<double> log_softmax_rows(const float* logits, size_t rows, size_t V) {
  std::vector<double> out;
  for (size_t r = 0; r < rows; ++r) {
    const float* l = logits + r * V;
    double mx = -1e300, z = 0;
    for (size_t i = 0; i < V; ++i) mx = std::max(mx, double(l[i]));
    for (size_t i = 0; i < V; ++i) z += std::exp(l[i] - mx);
    for (size_t i = 0; i < V; ++i) out.push_back(l[i] - mx - std::log(z));
  }
  return out;
}

/// Largest |a[i] - b[i]| (the sizes must agree).
inline double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(a[i] - b[i]));
  return d;
}

/// The float64 reference's log-probs of every position of `ids`, flattened [T * V].
inline std::vector<double> reference_log_probs(const ReferenceModel& ref, const std::vector<int32_t>& ids,
                                               const Ablation& ab = {}) {
  std::vector<double> out;
  for (const auto& row : ref.logits(ids, ab)) {
    const double mx = *std::max_element(row.begin(), row.end());
    double z = 0;
    for (double v : row) z += std::exp(v - mx);
    for (double v : row) out.push_back(v - mx - std::log(z));
  }
  return out;
}

}  // namespace kveval::test
