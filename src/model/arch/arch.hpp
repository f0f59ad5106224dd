#pragma once
// Architecture recipes: what one transformer block of a GGUF architecture is
// made of and which numbers its forward pass uses. The loader
// (model_load.cpp: read_hparams, load_layer), the forward pass (forward.cpp:
// embed, attention_block, ffn_block, output_head) and the random-model writer
// read only these recipes, so a new Llama-family architecture is one small file
// in this folder plus its line in arch.cpp's registry.
//
// Facts from llama.cpp: tensor names (src/llama-arch.cpp), which tensors each
// architecture creates and which are optional (src/llama-model.cpp,
// load_tensors), RoPE layout per architecture (llama_model_rope_type), the
// graph of each architecture (src/models/*.cpp, llm_build_*).
//
// Norm weights are used as stored: Gemma's RMSNorm multiplies by (1 + w), but
// llama.cpp's converter (convert_hf_to_gguf.py, Gemma/Gemma2/Gemma3Model:
// `if name.endswith("norm.weight"): data_torch = data_torch + 1`) writes 1 + w
// into the GGUF, so no recipe field adds the offset.
#include <string>
#include <string_view>
#include <vector>

namespace kveval {
struct HParams;
}

namespace kveval::arch {

/// How RoPE pairs the dimensions of a head (llama.cpp's llama_rope_type).
enum class RopeStyle {
  /// LLAMA_ROPE_TYPE_NORM: rotates adjacent pairs (x[2i], x[2i+1]). Llama's
  /// GGUF conversion permutes the rows of Q and K so that this layout equals
  /// the Hugging Face model's rotate_half.
  Normal,
  /// LLAMA_ROPE_TYPE_NEOX: rotates (x[i], x[i + n_rot/2]) (Hugging Face's
  /// rotate_half, used as is by Qwen2/Qwen3 GGUFs).
  Neox,
};
/// "normal" / "neox".
const char* to_string(RopeStyle s);

/// Whether a tensor must be in the file, may be, or must not be.
enum class Presence { Absent, Optional, Required };

/// Where a block normalises (llama.cpp's graphs): Pre = RMSNorm before
/// attention and FFN only (Llama); PreAndPost = also RMSNorm of each branch's
/// output before it joins the residual stream (Gemma 2/3:
/// blk.N.post_attention_norm.weight, blk.N.post_ffw_norm.weight [n_embd]).
enum class NormPlacement { Pre, PreAndPost };

/// The gated FFN's activation: ffn_down(act(gate) * up).
enum class FfnActivation {
  SiLU,      ///< SwiGLU (Llama, Qwen; llama.cpp LLM_FFN_SILU + LLM_FFN_PAR)
  GeluTanh,  ///< GeGLU with GELU's tanh approximation (Gemma; LLM_FFN_GELU + LLM_FFN_PAR)
};

/// A number of the forward pass: GGUF key "{arch}.{key}" when `key` is set and
/// the file has it, else derive(hp) when `derive` is set, else `value`. 0 means
/// the feature is off (the forward pass then skips it).
struct Param {
  std::string_view key = {};
  float value = 0.0f;
  float (*derive)(const HParams& hp) = nullptr;
  /// The file must have `key` (the architecture's converter always writes it;
  /// a file without it is refused naming the key).
  bool required = false;
  /// 0 is refused (the architecture always uses the feature).
  bool positive = false;
};

/// One architecture's recipe: general.architecture, the key prefix of its
/// hyper-parameters, which tensors its blocks have beyond the common Llama
/// block (attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down;
/// token_embd, output_norm, optional output — tied to token_embd when absent)
/// and the numbers and options of its forward pass. Every field's default is
/// the Llama block, so a recipe sets only what differs.
struct Description {
  std::string_view name;    ///< general.architecture, also the GGUF key prefix ("{name}.block_count")
  std::string_view family;  ///< models that use it (for docs/models.md and messages)
  RopeStyle rope = RopeStyle::Normal;
  Presence qkv_bias = Presence::Absent;    ///< blk.N.attn_{q,k,v}.bias [n_head*head_dim], [kv_dim], [kv_dim]
  Presence out_bias = Presence::Absent;    ///< blk.N.attn_output.bias [n_embd]
  Presence ffn_bias = Presence::Absent;    ///< blk.N.ffn_{gate,up}.bias [n_ff], ffn_down.bias [n_embd]
  /// blk.N.attn_{q,k}_norm.weight [head_dim]: RMSNorm of each query/key head
  /// (eps = the model's rms epsilon) after the projection, before RoPE.
  Presence qk_norm = Presence::Absent;
  /// rope_freqs.weight [n_rot/2]: per-pair frequency divisors (Llama 3.1+
  /// "llama3" rope scaling, written by llama.cpp's converter).
  Presence rope_freqs = Presence::Absent;
  /// LongRoPE (Phi-3): rope_factors_long.weight and rope_factors_short.weight
  /// [n_rot/2], both or neither; the loader keeps the long set when the run's
  /// context (ModelOptions::n_ctx) exceeds {name}.rope.scaling.original_context_length
  /// (default context_length), else the short one (llama.cpp get_rope_factors), and
  /// divides each pair's frequency by it as rope_freqs does.
  Presence longrope = Presence::Absent;
  /// output.weight [n_embd, n_vocab]: Optional = tied to token_embd when absent;
  /// Absent = always tied (Gemma 2: llama.cpp never reads output.weight, so a file with one is refused).
  Presence output = Presence::Optional;
  /// llama.cpp requires {name}.rope.dimension_count == head_dim (LLAMA); otherwise
  /// partial rotary (n_rot < head_dim) is allowed.
  bool full_rotary = false;

  // ---- block layout (load_layer) ----
  NormPlacement norm = NormPlacement::Pre;  ///< forward.cpp attention_block / ffn_block
  /// blk.N.attn_qkv.weight [n_embd, n_q + 2 kv_dim] (bias attn_qkv.bias) instead
  /// of attn_q/k/v (Phi-3); loaded into the same stacked matrix.
  bool fused_qkv = false;
  /// blk.N.ffn_up.weight [n_embd, 2 n_ff] holding [gate | up] (bias ffn_up.bias
  /// [2 n_ff]) and no ffn_gate (Phi-3); loaded into the same stacked matrix.
  bool fused_gate_up = false;
  FfnActivation ffn_act = FfnActivation::SiLU;  ///< ffn_block

  // ---- numbers (read_hparams resolves them into HParams; 0 = off) ----
  Param embd_scale = {};      ///< embed: x = token_embd row * s (Gemma: sqrt(n_embd); Granite: {arch}.embedding_scale)
  Param residual_scale = {};  ///< attention_block, ffn_block: x += s * branch (Granite: {arch}.residual_scale)
  /// attend: score = s * q · k; 0 = 1 / sqrt(head_dim) (Granite: {arch}.attention.scale;
  /// Gemma 2: 1 / sqrt(query_pre_attn_scalar)).
  Param attn_scale = {};
  Param attn_softcap = {};    ///< attend: score = c tanh(score / c) (Gemma 2: {arch}.attn_logit_softcapping)
  /// attend: a sliding-window layer's query sees the last `window` positions,
  /// itself included (Gemma 2/3, Mistral: {arch}.attention.sliding_window).
  Param sliding_window = {};
  /// Which layers slide when the window is on (Gemma 2: even layers; Gemma 3:
  /// 5 of every 6); nullptr = every layer. A file's
  /// {arch}.attention.sliding_window_pattern (llama.cpp's override) must name the same layers.
  bool (*sliding_layer)(int layer) = nullptr;
  /// RoPE base of the sliding layers: {arch}.rope.freq_base_swa (llama.cpp's key) when
  /// the file has it, else `value`; 0 = {arch}.rope.freq_base (Gemma 2; Gemma 3: 10000).
  Param rope_base_swa = {};
  /// Sliding layers rotate without the file's linear rope scaling (Gemma 3:
  /// llama.cpp keeps rope_freq_scale_train_swa at 1); false = the same scaling as the others.
  bool swa_rope_unscaled = false;
  /// RoPE: cos and sin of every rotated pair times it, so the rotated dimensions of
  /// Q and K are scaled (llama.cpp's attn_factor of ggml_rope_ext; Phi-3 LongRoPE:
  /// {arch}.rope.scaling.attn_factor, default 1); 0 = 1.
  Param rope_attn_factor = {};
  Param logit_scale = {};     ///< output_head: logits /= s (Granite: {arch}.logit_scale)
  Param final_softcap = {};   ///< output_head: logits = c tanh(logits / c) (Gemma 2: {arch}.final_logit_softcapping)
  // RoPE: `rope` (pair layout) and `rope_freqs` above; linear scaling comes
  // from {arch}.rope.scaling.* for every architecture (read_hparams).
};

/// The description for general.architecture `name`, or nullptr if kveval does not support it.
const Description* find(std::string_view name);
/// All supported architectures, in the order of the table in docs/models.md.
const std::vector<const Description*>& all();
/// "llama, qwen2, qwen3, gemma2, ..." (for error messages).
std::string names();

// ---- GGUF tensor names (llama.cpp src/llama-arch.cpp) ----------------------

inline constexpr std::string_view kTokenEmbd = "token_embd.weight";
inline constexpr std::string_view kOutputNorm = "output_norm.weight";
inline constexpr std::string_view kOutput = "output.weight";
inline constexpr std::string_view kRopeFreqs = "rope_freqs.weight";
inline constexpr std::string_view kRopeFactorsLong = "rope_factors_long.weight";
inline constexpr std::string_view kRopeFactorsShort = "rope_factors_short.weight";
/// "blk.{layer}.{base}.{kind}", e.g. blk_tensor(3, "attn_q", "bias") = "blk.3.attn_q.bias".
std::string blk_tensor(int layer, std::string_view base, std::string_view kind = "weight");

}  // namespace kveval::arch
