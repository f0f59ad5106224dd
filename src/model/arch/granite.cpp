// general.architecture = granite: IBM Granite 3.x dense models.
// llama.cpp (src/models/granite.cpp, LLM_ARCH_GRANITE; RoPE NORM, as the
// converter's GraniteModel is LlamaModel with permuted Q/K rows): the Llama
// block with four multipliers. Embeddings times {arch}.embedding_scale
// (build_inp_embd), each attention and FFN branch times {arch}.residual_scale
// before its residual add, scores times {arch}.attention.scale instead of
// 1 / sqrt(head_dim), logits divided by {arch}.logit_scale. llama.cpp reads
// logit_scale as required and the other three as optional (absent or 0 = off);
// the converter (conversion/granite.py) writes each from config.json's
// embedding_multiplier, residual_multiplier, attention_multiplier and
// logits_scaling. rope.dimension_count must equal the head size (GGML_ASSERT
// n_embd_head == n_rot); optional biases and rope_freqs as llama; output tied when absent.
#include "model/arch/arch.hpp"

namespace kveval::arch {

const Description& granite() {
  static const Description d{
      .name = "granite",
      .family = "Granite 3.0, 3.1, 3.2, 3.3 (dense)",
      .rope = RopeStyle::Normal,
      .qkv_bias = Presence::Optional,
      .out_bias = Presence::Optional,
      .ffn_bias = Presence::Optional,
      .rope_freqs = Presence::Optional,
      .full_rotary = true,
      .embd_scale = {.key = "embedding_scale"},
      .residual_scale = {.key = "residual_scale"},
      .attn_scale = {.key = "attention.scale"},
      .logit_scale = {.key = "logit_scale", .required = true, .positive = true},
  };
  return d;
}

}  // namespace kveval::arch
