#pragma once
// Fidelity of a reduced-precision compute dtype (docs/dtypes.md): the same
// evaluation scored in f32 and in bf16, compared request by request: per-token
// |Δ log-prob| of every scored token, and per-document flips of the
// 0/1 metrics (acc, acc_norm, acc_bytes, exact_match) and of the greedy text.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "eval/runner.hpp"

namespace kveval::eval {

/// |a_i - b_i| over every token of every request (a[r], b[r] are the per-token
/// log-probs of request r, nats). Throws ArgumentError when the shapes differ.
struct TokenDeltas {
  int64_t requests = 0;
  int64_t tokens = 0;
  double max_abs = 0;   ///< largest |Δ| (nats), 0 when no token
  double mean_abs = 0;  ///< mean |Δ| per token (nats), 0 when no token
};
TokenDeltas token_deltas(std::span<const std::vector<double>> a, std::span<const std::vector<double>> b);

/// Documents whose value of one metric differs between two runs.
struct MetricFlips {
  std::string task;
  std::string metric;    ///< "acc", "acc_norm", "acc_bytes", "exact_match", or "greedy_text" (generated text differs)
  int64_t compared = 0;  ///< documents that ran in both runs
  int64_t flipped = 0;
};

/// Per task, the 0/1 per-document metrics (doc_metric_values: acc, acc_norm,
/// acc_bytes, exact_match) whose value differs between `a` and `b`, and for
/// generate_until tasks the documents whose generated text differs
/// ("greedy_text"). `a` and `b` are runs of the same spec (same tasks and
/// documents); throws ArgumentError otherwise. Tasks without such a metric give no entry.
std::vector<MetricFlips> metric_flips(const EvalSpec& spec, const RunResult& a, const RunResult& b);

/// Everything `kveval bench --tests fidelity` reports.
struct FidelityReport {
  TokenDeltas tokens;              ///< over every scored token (loglikelihood and rolling requests)
  std::vector<MetricFlips> flips;  ///< per task and metric
  std::string dtype_a, dtype_b;    ///< resolved dtypes ("f32", "bf16")
  std::string matmul_a = "exact", matmul_b = "exact";  ///< each run's matmul mode ("exact", "int8")
  /// How `tokens` was scored: "cache-free" (kveval::score) or "teacher-forced decode" (decode_logprobs).
  std::string scoring = "cache-free";
  size_t requests = 0;             ///< requests of the plan (the first run's)
  int failed[2] = {0, 0};          ///< requests with a per-request error in the run of dtype a, of dtype b
  int failed_either = 0;           ///< requests that failed in either run: left out of `tokens` and `flips`
  std::string first_error;         ///< the first failed request's error (run a first), "" when none failed
};

/// What the requests of a run of `spec` would be, known before any model loads.
struct RequestPreview {
  size_t requests = 0;      ///< requests built
  size_t failed = 0;        ///< of those, failed before scoring (too long for max_length, ...)
  std::string first_error;  ///< the first failed request's error, "" when none failed
};

/// Builds the requests of `spec` as a run does (build_requests, max_length from
/// run_max_length) with only the header and the tokenizer of the GGUF file
/// spec.model read, no weights. Throws SpecError when spec.max_length exceeds
/// the file's context_length, and what gguf::File, Tokenizer::from_gguf and
/// build_requests throw.
RequestPreview preview_requests(const EvalSpec& spec);

/// Runs `spec` (its model, threads, batch size and kv_cache_dtype, which
/// `auto` resolves per run: a bf16 run generates with a bf16 cache) with compute dtype `a`,
/// then `b` (one model load each, run_eval with the default options), scores
/// every loglikelihood/rolling request of the plan that ran again with each
/// model (kveval::score, per-token log-probs) and compares; counts the failed
/// requests of both runs. Throws what run_eval and Model::load throw.
FidelityReport compare_dtypes(const EvalSpec& spec, ComputeDtype a, ComputeDtype b);

/// Per-token log-probs (nats) of tokens [score_from, size) of `r`, teacher-forced
/// through the KV cache as generation runs them: tokens [0, score_from) in one
/// cached pass, then one token per pass, each step's logits log-softmaxed in
/// double. Sets up caches of 1 row x (size - 1) positions and deletes them
/// after. Throws Error when a step's logits are not finite, and what
/// Context::forward throws.
std::vector<double> decode_logprobs(Context& ctx, const ScoreRequest& r);

/// compare_dtypes for the two matmul modes in one compute dtype `dtype`: run a
/// with MatmulMode::Exact, run b with MatmulMode::Int8 (one load each). Since
/// cache-free scoring never takes the int8 kernels (they serve decode steps
/// only), each scoring request's tokens are teacher-forced through the cache in
/// both models (decode_logprobs), so `tokens` measures what int8 changes in decode steps.
FidelityReport compare_matmul(const EvalSpec& spec, ComputeDtype dtype);

}  // namespace kveval::eval
