// general.architecture = qwen3: Qwen3 (dense).
// llama.cpp (LLM_ARCH_QWEN3): RoPE NEOX, no biases, RMSNorm of every Q and K
// head (attn_q_norm, attn_k_norm [head_dim]) before RoPE; head_dim from
// qwen3.attention.key_length (128, which is not n_embd / n_head for every size).
// Hugging Face transformers modeling_qwen3.py: q_norm/k_norm over head_dim.
#include "model/arch/arch.hpp"

namespace kveval::arch {

const Description& qwen3() {
  static const Description d{
      .name = "qwen3",
      .family = "Qwen3",
      .rope = RopeStyle::Neox,
      .qk_norm = Presence::Required,
  };
  return d;
}

}  // namespace kveval::arch
