#pragma once
// Seeded sampling of the next token. The logits pass through Hugging Face's
// logits warpers in the order transformers' GenerationMixin._get_logits_processor
// builds them (generation/utils.py; generation/logits_process.py):
// TemperatureLogitsWarper -> TopKLogitsWarper -> TopPLogitsWarper -> MinPLogitsWarper,
// each with min_tokens_to_keep = 1. A token is then drawn by the inverse CDF
// of the kept, renormalised probabilities (float64, ascending token id) at a
// uniform that depends only on (seed, request, repeat, step): Philox4x32-10,
// the counter-based generator of Salmon, Moraes, Dror and Shaw, "Parallel
// random numbers: as easy as 1, 2, 3" (SC'11; Random123's philox.h). So a
// request's sample does not depend on batching, threads or ranks.
#include <array>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kveval {

/// Decoding parameters with the names and defaults of Hugging Face's
/// GenerationConfig (do_sample false, temperature 1, top_k 50, top_p 1, min_p
/// unset = 0), which lm-eval passes through for HF models.
struct SamplingParams {
  bool do_sample = false;    ///< false: greedy (argmax, the first one on ties)
  double temperature = 1.0;  ///< >= 0; 0 with do_sample is greedy as well (llama.cpp's temp <= 0)
  int top_k = 50;            ///< >= 0; 0 keeps every token
  double top_p = 1.0;        ///< in (0, 1]; 1 keeps every token
  double min_p = 0.0;        ///< in [0, 1]; 0 keeps every token
  uint64_t seed = 1234;      ///< key of the generator
  /// True when the next token is the argmax: !do_sample or temperature == 0.
  bool greedy() const { return !do_sample || temperature == 0.0; }
};

/// Philox4x32-10 (Random123 philox4x32_R with R = 10): the 128-bit block of
/// `counter` under the 64-bit `key`. Known-answer vectors: Random123's
/// examples/kat_vectors.
std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> counter, std::array<uint32_t, 2> key);

/// The uniform in [0, 1) (53 random bits) of draw `step` of repeat `repeat` of
/// request `request` under `seed`: Philox4x32-10 with key = seed and counter =
/// (step, repeat, request low 32 bits, request high 32 bits); the first two
/// output words give the 53 bits.
double sample_uniform(uint64_t seed, uint64_t request, uint32_t repeat, uint32_t step);

/// The distribution a sample is drawn from: the tokens the warpers keep, in
/// ascending id, each with its probability (float64, summing to 1). `logits`
/// must be finite. Greedy parameters give the argmax with probability 1.
std::vector<std::pair<int32_t, double>> sampling_distribution(std::span<const float> logits, const SamplingParams& p);

/// Reusable buffers of sample_token (no allocation per token after the first).
struct SamplingScratch {
  std::vector<double> scaled;   ///< [V] logits / temperature
  std::vector<int32_t> kept;    ///< kept token ids
  std::vector<double> weight;   ///< weights of `kept`
  std::vector<double> top_k;    ///< [V] copy of `scaled` for top-k's selection
  std::vector<size_t> order;    ///< top-p: indices into `kept` by ascending weight
  std::vector<uint8_t> drop;    ///< top-p / min-p: 1 for a kept token to remove
};

/// The token drawn from sampling_distribution(logits, p) at uniform `u` in
/// [0, 1): the first kept token (ascending id) whose cumulative probability
/// exceeds u. `logits` must be finite.
int32_t sample_token(std::span<const float> logits, const SamplingParams& p, double u, SamplingScratch& s);

}  // namespace kveval
