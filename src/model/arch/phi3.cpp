// general.architecture = phi3: Phi-3-mini, Phi-3.5-mini, Phi-4-mini.
// llama.cpp (src/models/phi3.cpp, LLM_ARCH_PHI3; RoPE NEOX): Q, K and V from
// one fused attn_qkv [n_embd, n_embd + 2 kv_dim] (the converter keeps
// Hugging Face's qkv_proj), the FFN from one ffn_up [n_embd, 2 n_ff] whose first
// half is the gate (build_ffn LLM_FFN_SWIGLU on the fused output: ggml_swiglu =
// silu(first half) * second half, Hugging Face's gate_up_proj.chunk(2)); no
// biases. Partial rotary: rope.dimension_count = partial_rotary_factor * head
// size (Phi-4-mini: 96 of 128), the other dimensions pass through. LongRoPE
// (Phi-3.5-mini, Phi-4-mini, the 128k Phi-3s): rope_factors_long / _short
// [n_rot/2] (llama.cpp get_rope_factors: long when its context exceeds
// rope.scaling.original_context_length), and rope.scaling.attn_factor (the
// converter's sqrt(1 + ln(scale) / ln(original context))) on cos and sin.
// attention.sliding_window (Phi-3-mini: 2047; 0 = none, the converter's
// Phi-4 marker) makes every layer see the last `window` positions, as Hugging
// Face's Phi3 attention does; llama.cpp ignores it ("Phi SWA is currently
// disabled"), so the two agree while a sequence fits the window. Output tied
// when absent (Phi-4-mini ties it).
#include "model/arch/arch.hpp"

namespace kveval::arch {

const Description& phi3() {
  static const Description d{
      .name = "phi3",
      .family = "Phi-3-mini, Phi-3.5-mini, Phi-4-mini",
      .rope = RopeStyle::Neox,
      .longrope = Presence::Optional,
      .fused_qkv = true,
      .fused_gate_up = true,
      .sliding_window = {.key = "attention.sliding_window"},
      .rope_attn_factor = {.key = "rope.scaling.attn_factor", .value = 1.0f, .positive = true},
  };
  return d;
}

}  // namespace kveval::arch
