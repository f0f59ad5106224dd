#pragma once
// Parameter, FLOP and byte counts of a Llama-family forward pass, from the
// hyper-parameters alone: the load line's parameter count comes from the file
// (file_parameters), everything else from HParams. Used by `kveval bench`
// (roofline fractions, the "ideal" cached/uncached ratio), the distributed
// run's request planner (eval/shard.hpp, by matmul_params) and the load summary.
//
// Matmul FLOPs count 2·M·N·K per weight matrix (one multiply and one add per
// term), the usual 2·N·params per token of Kaplan et al., "Scaling Laws for
// Neural Language Models" (2020), §2.1. Per layer the weights are
// wq [n_embd_q, n_embd], wk and wv [n_head_kv·head_dim, n_embd],
// wo [n_embd, n_embd_q], w1 and w3 [n_ff, n_embd], w2 [n_embd, n_ff]; the
// output layer is [n_vocab, n_embd] (token_embd when tied). Causal attention
// over n tokens from position 0 costs, per layer, 2 matmul-like products (QKᵀ
// and PV) of 2·(n²/2)·n_embd_q FLOPs each, i.e. 2·n²·n_embd_q (the causal half
// of the score matrix; softmax not counted). Counts are doubles (exact below
// 2^53); FLOPs are floating-point operations, bytes are bytes.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/roofline.hpp"
#include "model/model.hpp"

namespace kveval {

namespace gguf { class File; }

/// Elements of all tensors in the file (norms, biases and any extra tensors
/// included): the parameter count of the load line.
uint64_t file_parameters(const gguf::File& f);
/// Parameters of the model from its hyper-parameters: embeddings, layer
/// matrices, the two norms per layer, the output norm, and the output matrix if untied.
double n_params(const HParams& hp);
/// Weights that take part in a matrix product for every token: all layers'
/// matrices plus the output matrix (n_vocab·n_embd, counted even when tied);
/// one token's forward costs 2·matmul_params FLOPs before attention.
double matmul_params(const HParams& hp);
/// Matmul FLOPs of all layers' weight matrices for one token (excludes the output layer).
double layer_matmul_flops_per_token(const HParams& hp);
/// Matmul FLOPs of the output layer for one position: 2·n_embd·n_vocab.
double output_matmul_flops_per_token(const HParams& hp);
/// Attention FLOPs of all layers for one sequence of n tokens starting at position 0: 2·n²·n_embd_q·n_layer.
double attention_flops_causal(const HParams& hp, int64_t n);
/// FLOPs of a cache-free forward over `batch` rows of `n_prompt` tokens with
/// logits at every position: batch·(n_prompt·(layers + output) + attention(n_prompt)).
double prompt_flops(const HParams& hp, int64_t n_prompt, int64_t batch);
/// Matmul FLOPs of generating `n_gen` tokens after `n_prompt` for one row,
/// logits only where a token is chosen: cached = layers·(n_prompt + n_gen − 1)
/// + output·n_gen; uncached (step i re-runs n_prompt + i tokens) =
/// layers·(n_gen·n_prompt + n_gen(n_gen−1)/2) + output·n_gen.
double generate_matmul_flops(const HParams& hp, int64_t n_prompt, int64_t n_gen, bool cached);
/// Bytes of weights one decode step streams from memory: the resident bytes
/// (token_embd, matrices in the compute dtype or their blocks, a tied output's
/// copy included) minus those only the embedding lookup reads (one row per
/// token): LoadSummary::resident_bytes − lookup_only_bytes.
double streamed_weight_bytes(const LoadSummary& s);
/// The weight matmuls of one forward as oneDNN shapes: layer matrices at
/// M = m_layers rows (count n_layer), the output matrix at M = m_output rows.
std::vector<backend::GemmShape> weight_gemm_shapes(const HParams& hp, int64_t m_layers, int64_t m_output);
/// Bytes backend::sgemm_throughput allocates for `shapes` (float32): per shape
/// A [m, k] twice (host copy and oneDNN memory), B [k, n] twice (host copy and
/// the reordered weights) and C [m, n]; oneDNN's small scratchpad is not counted.
uint64_t sgemm_bytes(const std::vector<backend::GemmShape>& shapes);

}  // namespace kveval
