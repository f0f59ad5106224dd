#pragma once
// Architecture descriptions: what one transformer block of a GGUF
// architecture is made of. The loader (model_load.cpp), the forward pass
// (model.cpp) and the random-model writer read only these descriptions, so a
// new Llama-like architecture is one small file in this folder plus one line
// in arch.cpp's registry.
//
// Facts from llama.cpp: tensor names (src/llama-arch.cpp), which tensors each
// architecture creates and which are optional (src/llama-model.cpp,
// load_tensors), RoPE layout per architecture (llama_model_rope_type).
#include <string>
#include <string_view>
#include <vector>

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

/// One architecture: general.architecture, the key prefix of its
/// hyper-parameters, and which tensors its blocks have beyond the common
/// Llama block (attn_norm, attn_q/k/v/output, ffn_norm, ffn_gate/up/down;
/// token_embd, output_norm, optional output — tied to token_embd when absent).
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
  /// llama.cpp requires {name}.rope.dimension_count == head_dim (LLAMA); otherwise
  /// partial rotary (n_rot < head_dim) is allowed.
  bool full_rotary = false;
};

/// The description for general.architecture `name`, or nullptr if kveval does not support it.
const Description* find(std::string_view name);
/// All supported architectures, in the order of the table in docs/models.md.
const std::vector<const Description*>& all();
/// "llama, qwen2, qwen3" (for error messages).
std::string names();

// ---- GGUF tensor names (llama.cpp src/llama-arch.cpp) ----------------------

inline constexpr std::string_view kTokenEmbd = "token_embd.weight";
inline constexpr std::string_view kOutputNorm = "output_norm.weight";
inline constexpr std::string_view kOutput = "output.weight";
inline constexpr std::string_view kRopeFreqs = "rope_freqs.weight";
/// "blk.{layer}.{base}.{kind}", e.g. blk_tensor(3, "attn_q", "bias") = "blk.3.attn_q.bias".
std::string blk_tensor(int layer, std::string_view base, std::string_view kind = "weight");

// The descriptions (one file each).
const Description& llama();
const Description& qwen2();
const Description& qwen3();

}  // namespace kveval::arch
