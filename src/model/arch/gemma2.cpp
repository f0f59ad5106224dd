// general.architecture = gemma2: Gemma 2 (2B, 9B, 27B).
// llama.cpp (src/models/gemma2.cpp, LLM_ARCH_GEMMA2; RoPE NEOX in
// llama_model_rope_type): embeddings times sqrt(n_embd); RMSNorm before and
// after attention and FFN (post_attention_norm, post_ffw_norm); queries scaled
// by 1 / sqrt(head_dim), or 1 / sqrt(n_embd / n_head) for the 46-layer 27B
// (llama.cpp picks it by layer count; query_pre_attn_scalar is not in the GGUF);
// attention scores soft-capped by attn_logit_softcapping; GELU(tanh)-gated FFN;
// sliding-window attention (attention.sliding_window, default 4096) on even
// layers (llama.cpp set_swa_pattern(2): il % 2 < 1); output always tied to
// token_embd (an output.weight would be unused); logits soft-capped by
// final_logit_softcapping. The converter (conversion/gemma.py Gemma2Model)
// writes both soft-caps, the window and key/value_length, and stores norm
// weights as 1 + w (see arch.hpp).
#include <cmath>

#include "model/arch/arch.hpp"
#include "model/model.hpp"

namespace kveval::arch {

namespace {

float gemma2_attn_scale(const HParams& hp) {
  const int n = hp.n_layer == 46 ? hp.n_embd / hp.n_head : hp.head_dim();  // llama.cpp: LLM_TYPE_27B
  return 1.0f / std::sqrt(static_cast<float>(n));
}

}  // namespace

const Description& gemma2() {
  static const Description d{
      .name = "gemma2",
      .family = "Gemma 2",
      .rope = RopeStyle::Neox,
      .output = Presence::Absent,
      .norm = NormPlacement::PreAndPost,
      .ffn_act = FfnActivation::GeluTanh,
      .embd_scale = {.derive = [](const HParams& hp) { return std::sqrt(static_cast<float>(hp.n_embd)); }},
      .attn_scale = {.derive = gemma2_attn_scale},
      .attn_softcap = {.key = "attn_logit_softcapping", .required = true, .positive = true},
      .sliding_window = {.key = "attention.sliding_window", .value = 4096.0f, .positive = true},
      .sliding_layer = [](int layer) { return layer % 2 == 0; },
      .rope_base_swa = {.key = "rope.freq_base_swa"},
      .final_softcap = {.key = "final_logit_softcapping", .required = true, .positive = true},
  };
  return d;
}

}  // namespace kveval::arch
