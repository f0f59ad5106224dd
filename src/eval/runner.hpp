#pragma once
// The plan of `kveval run`: load the model; build every request; run the
// LOG-LIKELIHOOD PHASE cache-free (whatever the task order in the spec);
// then the GENERATION PHASE inside one KvCacheScope sized from the plan;
// leave the scope (caches deleted); compute metrics. Each phase is timed.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "eval/metrics.hpp"
#include "eval/outcome.hpp"
#include "eval/requests.hpp"
#include "eval/shard.hpp"
#include "eval/spec.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "util/memory.hpp"

namespace kveval::eval {

/// Hooks for the CLI and tests. All optional.
struct RunOptions {
  /// Progress of a phase: requests done / total and tokens through the model so far; called
  /// with done = 0 when the phase starts and after every batch; the caller throttles.
  std::function<void(std::string_view phase, size_t done, size_t total, int64_t tokens)> progress;
  /// Informational lines (cache set-up bytes, truncation warnings) as they happen.
  std::function<void(const std::string& line)> log;
  /// What the generation scope does with the cache on exit: Release (default,
  /// torchtune's local_kv_cache: deleted, bytes 0 after the run) or Reuse
  /// (disabled and reset, the allocation kept for the model's next scope).
  CachePolicy cache_policy = CachePolicy::Release;
  /// How the generation phase schedules requests over the cache rows: Dynamic
  /// (default; a finished row takes the next request at once) or Static
  /// (groups of batch_size requests, each decoded until its longest row ends).
  /// Outputs are the same; only the time differs.
  Batching batching = Batching::Dynamic;
  /// Log-likelihood requests sharing a prefix (the choices of a multiple_choice
  /// document, documents with the same few-shot examples) share its positions
  /// in token-trie rows of at most max_length tokens (score(),
  /// ScoreOptions::share_prefixes); false scores each alone. Numbers are the
  /// same bit for bit either way (where the matmuls are batch-invariant).
  bool pack_prefixes = true;
  /// Test hook: called inside the generation scope before the requests of batch
  /// `batch` (0-based; generation-order requests [batch x rows, (batch + 1) x rows))
  /// start to be admitted into the cache rows; may throw.
  std::function<void(size_t batch)> before_generation_batch;
  /// Called when a phase starts ("load" in run_spec, "loglikelihood", "generation"); may throw (fault injection in tests).
  std::function<void(std::string_view phase)> on_phase;
  /// Distributed run (eval/shard.hpp): this rank runs only its share of the
  /// requests; rank 0 gathers every outcome and computes the metrics. size 1: a plain run.
  Shard shard;
  /// run_spec: compute the model file's SHA-256 while loading (RunResult::model_sha256; "" when false).
  bool hash_model = true;
  /// The memory the run may use; default: memory_budget() (util/memory.hpp) read when the plan is
  /// checked (with `--batch-size auto`, once, for both the pick and the check).
  std::optional<MemoryBudget> memory_budget;
};

/// Everything a run produced; reports are formatted from this.
struct RunResult {
  std::string model_path;
  LoadSummary load;                      ///< the model's load summary (Model::load_summary())
  std::string model_sha256;              ///< Model::sha256(): of the bytes loaded, taken at load
  int threads = 0;                       ///< compute threads of the model
  std::string dtype;                     ///< resolved compute dtype of the model ("f32", "bf16", "q8_0", "q4_0", "blocks" or "blocks-bf16")
  std::string kv_cache_dtype;            ///< element type of the generation phase's KV cache ("f32", "bf16" or "f16")
  int max_length = 0;                    ///< resolved context window (tokens)
  int batch_size = 1;
  std::vector<Request> requests;         ///< every request, in spec order
  std::vector<RequestOutcome> outcomes;  ///< outcomes[i] of requests[i]
  std::vector<std::vector<DocOutcome>> docs;          ///< per task, per document
  std::vector<ChunkedOutcome> chunked;                ///< per task: llama.cpp perplexity (rolling_method "llama.cpp")
  std::vector<std::vector<MetricValue>> metrics;      ///< per task (spec order)
  std::vector<std::vector<MetricValue>> group_metrics;  ///< per group (spec.groups order; compute_group_metrics)
  std::vector<int> task_errors;          ///< per task: requests with a per-request error
  int n_request_errors = 0;              ///< all requests with a per-request error
  std::vector<Phase> phases;             ///< in execution order
  std::vector<std::string> warnings;
  /// Distributed runs: the inputs whose size and sha256 every rank agreed on
  /// (Shard::same_inputs), for the results; empty in a one-rank run.
  std::vector<InputFingerprint> agreed_inputs;
  // cache accounting of the generation phase
  size_t cache_bytes_before = 0;         ///< Context::bytes() just before the generation scope
  size_t cache_bytes_setup = 0;          ///< Context::bytes() inside the scope (0 when no generation)
  size_t cache_bytes_after = 0;          ///< Context::bytes() after leaving the scope
  int cache_rows = 0, cache_positions = 0;  ///< shape of the scope (rows x positions per row)
  // memory of this rank: the plan checked before the first pass, and what the process held at most
  size_t planned_kv_cache = 0;           ///< bytes of KV cache planned (the largest scope of the run)
  size_t planned_activations = 0;        ///< bytes of activations planned (the largest pass of the run)
  uint64_t peak_rss = 0;                 ///< util::peak_rss_bytes() at the end of the run (0: unknown)
  // instrumentation of the log-likelihood phase (deltas of Context::stats())
  uint64_t ll_forward_calls = 0;              ///< forward passes run by the log-likelihood phase
  uint64_t ll_forward_with_cache_setup = 0;   ///< of those, run while caches were set up: must be 0
  uint64_t ll_forward_cached = 0;             ///< of those, that read/appended a cache: must be 0
  uint64_t ll_tokens_requested = 0;           ///< tokens the requests run through the model unpacked (size - 1 each)
  uint64_t ll_tokens_computed = 0;            ///< tokens the passes computed (shared contexts once: prefix packing)
  uint64_t ll_logit_rows = 0;                 ///< logit rows materialised (the positions that predict a scored token)
  // distributed runs (RunOptions::shard.size > 1); on rank 0 the fields above cover every rank:
  // outcomes of all requests, phases with the wall seconds of the slowest rank and the tokens of all,
  // instrumentation counters summed; cache accounting is rank 0's own.
  int rank = 0;                               ///< this process's rank
  int n_ranks = 1;                            ///< ranks in the run
  std::vector<std::vector<Phase>> rank_phases;  ///< rank 0 only: each rank's own phases (rank order)
  std::vector<std::string> hosts;             ///< host of each rank (may be empty)
  /// True where the metrics are computed and reports are written (rank 0).
  bool is_root() const { return rank == 0; }
};

/// The context window (tokens) a run of `spec` uses on a model of context_length
/// `n_ctx`: spec.max_length, else n_ctx. Throws SpecError when max_length
/// exceeds n_ctx (naming the key or the option that set it) or the window is below 2.
int run_max_length(const EvalSpec& spec, int n_ctx);

/// The largest batch_size `--batch-size auto` picks (lm-eval's default --max_batch_size).
inline constexpr int kAutoBatchMax = 64;

/// The bytes `--batch-size auto` lets its plan (KV cache and activations) take
/// out of `available`: 9/10 of them, the tenth left for what the plan does not
/// count (allocator slack, the outcomes and reports, other processes' growth).
/// The memory check itself allows all of `available`, from the same reading,
/// so auto's pick always passes it.
constexpr uint64_t auto_batch_budget(uint64_t available) { return available - available / 10; }

/// Memory the plan of a run needs beyond the loaded weights (bytes):
/// the generation KV cache (rows x positions, K+V float32) and the peak of
/// the activations (the largest scoring pass with its logits of the scored
/// positions, score_pass_shapes, or the largest generation prefill, whichever
/// is larger; Model::activation_bytes_for).
struct MemoryPlan {
  size_t weights = 0;      ///< Model::weight_bytes(), already resident
  size_t kv_cache = 0;
  size_t activations = 0;
  int cache_rows = 0, cache_positions = 0;
};
/// The plan of `requests` (after build_requests) on `model` with `batch_size` rows
/// and a context of `max_length` tokens, prefix packing on (RunOptions::pack_prefixes).
MemoryPlan plan_memory(const EvalSpec& spec, const Model& model, const std::vector<Request>& requests,
                       int batch_size, int max_length);

/// Runs the plan in `ctx` over its already loaded model (no "load" phase). With
/// opts.shard.size > 1 every rank must call it with the same spec and model:
/// the requests are split by assign_requests, each rank runs its share through
/// the same phases, and rank 0 gathers and computes the metrics (other ranks
/// return a result without metrics: is_root() is false). `spec` must come
/// from load_spec/parse_spec. Throws SpecError when max_length exceeds the
/// model's context_length or a max_gen_toks does not fit; MemoryError (one
/// line naming the KV cache, activations and the memory available) when the
/// plan does not fit the memory budget, before any forward pass; CacheError when
/// `ctx` has caches set up on entry; Error (internal) when a log-likelihood
/// forward pass ran with caches set up; whatever the engine throws. On any
/// exception inside the generation scope the caches are deleted (bytes() == 0).
/// A request whose logits become non-finite (NaN/Inf) gets a per-request
/// error naming the task, document and token position and is left out of
/// the metrics.
RunResult run_eval(const EvalSpec& spec, Context& ctx, const RunOptions& opts = {});

/// Loads spec.model (threads = spec.threads), timed as phase "load", then run_eval.
RunResult run_spec(const EvalSpec& spec, const RunOptions& opts = {});

}  // namespace kveval::eval
