#pragma once
// Random-weight models in GGUF (every architecture of model/arch), for
// benchmarks and tests: same keys, tensor names and layout as llama.cpp's
// convert script writes, weights drawn deterministically from a seed
// (identical bytes on every machine).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace kveval {

/// Llama 3.1 "llama3" rope scaling (Hugging Face rope_scaling): the writer
/// turns it into rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py does
/// (LlamaModel.generate_extra_tensors).
struct Llama3RopeScaling {
  float factor = 0.0f;            ///< 0: no rope_freqs tensor
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_context = 8192;    ///< original_max_position_embeddings
};

/// The rope_freqs.weight values for `s`: per pair i (i < n_rot/2) with
/// frequency f = base^(-2i/n_rot) and wavelength w = 2 pi / f: 1 when
/// w < original_context / high_freq_factor, `factor` when
/// w > original_context / low_freq_factor, else 1 / ((1 - t) / factor + t) with
/// t = (original_context / w - low_freq_factor) / (high_freq_factor - low_freq_factor).
/// llama.cpp divides each pair's frequency by its value.
std::vector<float> llama3_rope_factors(const Llama3RopeScaling& s, float freq_base, int n_rot);

/// Phi-3 LongRoPE (Hugging Face rope_scaling type "longrope"): the writer adds
/// rope_factors_long.weight and rope_factors_short.weight [n_rot/2] and the keys
/// rope.scaling.original_context_length and rope.scaling.attn_factor, as
/// llama.cpp's converter (conversion/phi.py Phi3MiniModel) does. The factors
/// are synthetic: short 1 + 0.1 i, long 1 + 2 i for pair i (real sets also grow
/// with the wavelength, the long set much faster).
struct LongRopeScaling {
  int original_context = 0;  ///< > 0: original_max_position_embeddings, and the factor tensors are written
  float attn_factor = 1.0f;  ///< rope.scaling.attn_factor
};

/// The LongRoPE factor set of LongRopeScaling for n_rot rotated dimensions (n_rot/2 values).
std::vector<float> longrope_factors(bool long_set, int n_rot);

/// Shape and architecture of a random model ({arch}.* GGUF keys).
struct RandomModelSpec {
  std::string name;   ///< preset name, written as general.name "random-<name>"
  int n_embd = 0;     ///< {arch}.embedding_length
  int n_layer = 0;    ///< {arch}.block_count
  int n_head = 0;     ///< {arch}.attention.head_count
  int n_head_kv = 0;  ///< {arch}.attention.head_count_kv
  int n_ff = 0;       ///< {arch}.feed_forward_length
  int n_vocab = 0;    ///< tokens (synthetic vocabulary: >= 260; with `vocab`: its token count)
  int n_ctx = 0;      ///< {arch}.context_length
  std::string arch = "llama";  ///< general.architecture (model/arch: llama, qwen2, qwen3)
  /// Head size; written as {arch}.attention.key_length/value_length when > 0,
  /// else n_embd / n_head and no key.
  int n_embd_head = 0;
  float rope_freq_base = 10000.0f;  ///< {arch}.rope.freq_base
  float rms_eps = 1e-5f;            ///< {arch}.attention.layer_norm_rms_epsilon
  /// > 0: {arch}.rope.scaling.type = "linear" and {arch}.rope.scaling.factor.
  float rope_linear_factor = 0.0f;
  Llama3RopeScaling llama3;         ///< factor > 0: rope_freqs.weight (architectures that take it)
  bool tied_output = false;         ///< no output.weight (logits use token_embd)
  /// > 0: {arch}.attn_logit_softcapping / {arch}.final_logit_softcapping (gemma2).
  float attn_softcap = 0.0f, final_softcap = 0.0f;
  int sliding_window = 0;           ///< > 0: {arch}.attention.sliding_window (gemma2, gemma3, phi3)
  /// > 0: {arch}.rope.dimension_count below the head size (partial rotary, phi3); 0 = head_dim.
  int n_rot = 0;
  /// > 0: granite's {arch}.embedding_scale, residual_scale, attention.scale and logit_scale.
  float embedding_scale = 0.0f, residual_scale = 0.0f, attention_scale = 0.0f, logit_scale = 0.0f;
  LongRopeScaling longrope;         ///< original_context > 0: LongRoPE tensors and keys (phi3)
  float rope_freq_base_swa = 0.0f;  ///< > 0: {arch}.rope.freq_base_swa, the sliding layers' RoPE base (gemma3)
  /// Also write the architecture's optional block tensors (llama: the
  /// attn_q/k/v/output and ffn_gate/up/down biases).
  bool optional_tensors = false;
  /// GGUF file whose tokenizer.* keys are copied (any vocabulary, e.g. a
  /// vocab-only ggml-vocab-*.gguf). n_vocab must be at least its token count
  /// (random_model_vocab_size); a larger n_vocab pads the token list as
  /// llama.cpp's convert_hf_to_gguf.py pads a tokenizer shorter than
  /// config.json's vocab_size (see write_random_model). Empty: the synthetic
  /// SentencePiece vocabulary.
  std::string vocab;
  /// Per-matrix type overrides by tensor name (e.g. {"blk.0.attn_k.weight",
  /// F32}) for files that mix types; other matrices take write_random_model's `type`.
  std::map<std::string, gguf::TensorType> matrix_types;
  /// Real-model presets: the Hugging Face model whose config.json the spec
  /// copies (e.g. "meta-llama/Llama-3.2-1B"); empty for the synthetic shapes.
  std::string hf_model;
  int head_dim() const { return n_embd_head > 0 ? n_embd_head : n_embd / n_head; }
  int rot_dims() const { return n_rot > 0 ? n_rot : head_dim(); }
};

/// Presets (n_embd/n_layer/n_head/n_head_kv/n_ff/n_vocab/n_ctx). Synthetic
/// shapes of architecture llama: "s15m" (288/6/6/6/768/32000/256), "s110m"
/// (768/12/12/12/2048/32000/1024), "gqa" (2048/4/32/4/5632/32000/4096),
/// "tiny" (64/2/4/2/96/300/128). Real models, every field as llama.cpp's
/// convert_hf_to_gguf.py writes it from the model's config.json (hf_model
/// set; see random_model.cpp for the values): "llama-3.2-1b", "llama-3.2-3b"
/// (llama, tied output, rope base 500000, Llama 3 rope scaling factor 32 as
/// rope_freqs.weight, head_dim written as key/value_length) and
/// "qwen2.5-0.5b" (qwen2: Q/K/V biases, tied output, rope base 1e6, eps 1e-6).
/// Throws ArgumentError for another name (listing the presets).
RandomModelSpec random_model_preset(const std::string& name);
/// The preset names, in the order above.
std::vector<std::string> random_model_presets();

/// `shape` turned into a model of architecture flavour `flavour`:
/// "llama" (unchanged: rope base 10000, rms eps 1e-5), "llama3" (llama,
/// rope base 500000, Llama 3.1 rope scaling factor 8 / low 1 / high 4 /
/// original context 8192 as rope_freqs.weight), "qwen2" (Q/K/V biases, NEOX
/// rope, base 1000000, eps 1e-6), "qwen3" (Q/K norms, NEOX rope, base 1000000,
/// eps 1e-6, head size 128 as in every Qwen3 release), "gemma2" (NEOX rope,
/// base 10000, eps 1e-6, attention / final soft-caps 50 / 30, sliding window
/// 4096, tied output, key_length written as convert_hf_to_gguf.py's Gemma2Model
/// does), "gemma3" (gemma2's block with Q/K norms and no soft-caps, rope base
/// 1e6, sliding layers' base 10000, window 512 on 5 of 6 layers, tied), "granite"
/// (Granite 3.0: embedding / residual / attention / logit scales 12 / 0.22 /
/// 0.015625 / 8, tied), "phi3" (Phi-4-mini's block: fused attn_qkv and ffn_up,
/// NEOX rope over 3/4 of each head, tied; LongRoPE with the synthetic factors,
/// original context n_ctx / 4 and Phi-3.5-mini's attention factor
/// sqrt(1 + ln 32 / ln 4096)). Values from the models' Hugging Face config.json
/// files. Throws ArgumentError for another name.
RandomModelSpec random_model_flavour(RandomModelSpec shape, const std::string& flavour);
/// The flavour names, in the order above.
std::vector<std::string> random_model_flavours();

/// Tokens in the vocabulary of GGUF file `vocab_path` (tokenizer.ggml.tokens).
/// Throws FormatError naming the file if it is not a GGUF file with tokens.
int random_model_vocab_size(const std::string& vocab_path);

/// Number of weights (elements of all tensors) of `spec`.
uint64_t random_model_parameters(const RandomModelSpec& spec);

/// Writes a complete GGUF (v3, general.alignment 32) of architecture
/// spec.arch to `path`: all {arch}.* hyper-parameters; the tokenizer.* keys of
/// spec.vocab (when n_vocab exceeds its tokens, the per-token arrays are
/// padded to n_vocab as convert_hf_to_gguf.py does: tokens "[PAD<id>]" of type
/// UNUSED (5), scores -1000 when the file has scores), or a synthetic SentencePiece vocabulary of n_vocab pieces
/// (<unk>, <s>, </s>, <0x00>..<0xFF>, then distinct pieces "▁", "a".."z",
/// "▁a".., "aa".. with decreasing scores); and every tensor the architecture
/// uses (token_embd, output_norm, output unless tied, blk.N.{attn_norm,
/// attn_q, attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up,
/// ffn_down}, fused attn_qkv / ffn_up where the recipe fuses them, then the extras: rope_freqs,
/// rope_factors_long/short, biases, attn_q_norm/attn_k_norm, post-norms).
/// Matrices are uniform in [-sqrt(3/n_in), sqrt(3/n_in)) (std 1/sqrt(n_in))
/// from a counter-based splitmix64 stream keyed by (seed, tensor index,
/// element); norms are 1, Q/K norms uniform in [0.5, 1.5), biases uniform in
/// [-0.5, 0.5). Matrices are stored as `type` (F32, F16, BF16 or a quantized
/// type, kveval's quantizers); every 1-D tensor (norms, biases, Q/K norms,
/// rope_freqs) as F32, so the file follows llama.cpp's conventions and loads
/// there (tests/model/gguf_conventions.hpp lists the rules). Tensor data
/// is streamed, never held whole in memory. Returns bytes written. Throws
/// ArgumentError for an invalid spec or a type whose block size does not
/// divide n_embd or n_ff, FormatError for a bad vocab file, kveval::Error on
/// I/O failure.
uint64_t write_random_model(const std::string& path, const RandomModelSpec& spec, uint64_t seed,
                            gguf::TensorType type = gguf::TensorType::F32);

/// The writer write_random_model fills (same keys, tensors, order and
/// errors), before anything is written: its metadata(), tensor_infos() and
/// file_size() describe the file without generating a weight; write(path)
/// produces exactly write_random_model's bytes.
gguf::Writer random_model_writer(const RandomModelSpec& spec, uint64_t seed,
                                 gguf::TensorType type = gguf::TensorType::F32);

/// The name of write_random_model before other architectures existed (kept
/// for code written against it); same arguments and result.
inline uint64_t write_random_llama(const std::string& path, const RandomModelSpec& spec, uint64_t seed,
                                   gguf::TensorType type = gguf::TensorType::F32) {
  return write_random_model(path, spec, seed, type);
}

}  // namespace kveval
