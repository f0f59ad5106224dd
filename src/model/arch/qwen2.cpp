// general.architecture = qwen2: Qwen2, Qwen2.5.
// llama.cpp (LLM_ARCH_QWEN2): RoPE NEOX, biases on Q, K and V (required),
// none on the output projection or the MLP; output tied when absent.
// Hugging Face transformers modeling_qwen2.py: q/k/v_proj bias=True, o_proj bias=False.
#include "model/arch/arch.hpp"

namespace kveval::arch {

const Description& qwen2() {
  static const Description d{
      .name = "qwen2",
      .family = "Qwen2, Qwen2.5",
      .rope = RopeStyle::Neox,
      .qkv_bias = Presence::Required,
  };
  return d;
}

}  // namespace kveval::arch
