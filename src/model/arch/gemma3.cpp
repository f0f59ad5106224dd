// general.architecture = gemma3: Gemma 3 text models (270M, 1B, 4B, 12B, 27B).
// llama.cpp (src/models/gemma3.cpp, LLM_ARCH_GEMMA3; RoPE NEOX): Gemma 2's
// block (embeddings times sqrt(n_embd), post_attention_norm and post_ffw_norm,
// GeGLU, queries times 1 / sqrt(head_dim) or 1 / sqrt(n_embd / n_head) for the
// 62-layer 27B) without the attention soft-cap, with RMSNorm of each Q and K
// head before RoPE (attn_q_norm, attn_k_norm, required). When the file has
// attention.sliding_window > 0, 5 of every 6 layers slide (set_swa_pattern(6):
// il % 6 < 5) and rotate with rope.freq_base_swa (default 10000) and no linear
// scaling (rope_freq_scale_train_swa stays 1); the other layers use
// rope.freq_base and the file's rope scaling. The final soft-cap is optional
// (final_logit_softcapping; absent = off); output.weight optional (tied when
// absent). The converter (conversion/gemma.py Gemma3Model, base.py) writes
// rope.freq_base, rope.freq_base_swa and the window, norm weights as 1 + w.
#include <cmath>

#include "model/arch/arch.hpp"
#include "model/model.hpp"

namespace kveval::arch {

namespace {

float gemma3_attn_scale(const HParams& hp) {
  const int n = hp.n_layer == 62 ? hp.n_embd / hp.n_head : hp.head_dim();  // llama.cpp: LLM_TYPE_27B
  return 1.0f / std::sqrt(static_cast<float>(n));
}

}  // namespace

const Description& gemma3() {
  static const Description d{
      .name = "gemma3",
      .family = "Gemma 3 (text)",
      .rope = RopeStyle::Neox,
      .qk_norm = Presence::Required,
      .norm = NormPlacement::PreAndPost,
      .ffn_act = FfnActivation::GeluTanh,
      .embd_scale = {.derive = [](const HParams& hp) { return std::sqrt(static_cast<float>(hp.n_embd)); }},
      .attn_scale = {.derive = gemma3_attn_scale},
      .sliding_window = {.key = "attention.sliding_window"},
      .sliding_layer = [](int layer) { return layer % 6 < 5; },
      .rope_base_swa = {.key = "rope.freq_base_swa", .value = 10000.0f},
      .swa_rope_unscaled = true,
      .final_softcap = {.key = "final_logit_softcapping"},
  };
  return d;
}

}  // namespace kveval::arch
