// general.architecture = llama: Llama 1/2/3.x, Mistral 7B, TinyLlama, SmolLM.
// llama.cpp (src/llama-model.cpp, LLM_ARCH_LLAMA): RoPE NORM (the converter
// permutes Q/K rows), optional Q/K/V/output and MLP biases, optional
// rope_freqs (Llama 3.1+ frequency factors), output tied when absent.
#include "model/arch/arch.hpp"

namespace kveval::arch {

const Description& llama() {
  static const Description d{
      .name = "llama",
      .family = "Llama 1/2/3/3.1/3.2, Mistral 7B, TinyLlama, SmolLM",
      .rope = RopeStyle::Normal,
      .qkv_bias = Presence::Optional,
      .out_bias = Presence::Optional,
      .ffn_bias = Presence::Optional,
      .qk_norm = Presence::Absent,
      .rope_freqs = Presence::Optional,
      .full_rotary = true,
  };
  return d;
}

}  // namespace kveval::arch
