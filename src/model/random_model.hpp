#pragma once
// Random-weight Llama models in GGUF, for benchmarks and tests: same keys,
// tensor names and layout as llama.cpp's convert script writes, weights drawn
// deterministically from a seed (identical bytes on every machine).
#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.hpp"

namespace kveval {

/// Shape of a random Llama model (llama.* GGUF keys).
struct RandomModelSpec {
  std::string name;   ///< preset name, written as general.name "random-<name>"
  int n_embd = 0;     ///< llama.embedding_length
  int n_layer = 0;    ///< llama.block_count
  int n_head = 0;     ///< llama.attention.head_count
  int n_head_kv = 0;  ///< llama.attention.head_count_kv
  int n_ff = 0;       ///< llama.feed_forward_length
  int n_vocab = 0;    ///< tokens (>= 260: 3 specials, 256 bytes, >= 1 piece)
  int n_ctx = 0;      ///< llama.context_length
  int head_dim() const { return n_embd / n_head; }
};

/// Presets: "s15m" (288/6/6/6/768/32000/256), "s110m" (768/12/12/12/2048/32000/1024),
/// "gqa" (2048/4 layers/32 heads/4 kv/5632/32000/4096), "tiny" (64/2/4/2/96/300/128).
/// Throws ArgumentError for another name (listing the presets).
RandomModelSpec random_model_preset(const std::string& name);
/// The preset names, in the order above.
std::vector<std::string> random_model_presets();

/// Number of weights (elements of all tensors) of `spec`.
uint64_t random_model_parameters(const RandomModelSpec& spec);

/// Writes a complete Llama GGUF (v3, general.alignment 32) to `path`: all
/// llama.* hyper-parameters (rope.freq_base 10000, rms eps 1e-5), a synthetic
/// SentencePiece vocabulary of n_vocab pieces (<unk>, <s>, </s>, <0x00>..<0xFF>,
/// then distinct pieces "▁", "a".."z", "▁a".., "aa".. with decreasing scores),
/// and every tensor (token_embd, output_norm, output, blk.N.{attn_norm, attn_q,
/// attn_k, attn_v, attn_output, ffn_norm, ffn_gate, ffn_up, ffn_down}) with
/// weights uniform in [-sqrt(3/n_in), sqrt(3/n_in)) (std 1/sqrt(n_in)) from a
/// counter-based splitmix64 stream keyed by (seed, tensor, index); norms are 1.
/// Tensor data is streamed, never held whole in memory. `type` is the type of
/// every 2-D tensor (F32, F16, BF16, or a quantized type: kveval's quantizers);
/// the 1-D norm vectors are always F32, so the file follows llama.cpp's
/// conventions and loads there (tests/model/test_gguf_conventions.cpp lists
/// the rules). Returns bytes written. Throws ArgumentError for an invalid spec
/// or a type whose block size does not divide n_embd or n_ff, kveval::Error on
/// I/O failure.
uint64_t write_random_llama(const std::string& path, const RandomModelSpec& spec, uint64_t seed,
                            gguf::TensorType type = gguf::TensorType::F32);

}  // namespace kveval
