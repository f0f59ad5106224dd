#pragma once
// The measurements of `kveval bench` (llama-bench style: one warm-up, then
// `repetitions` timed runs summarised by median and standard deviation).
// Tests: pp (cache-free prompt forward), tg (cached decode), tg-nocache
// (decode re-running the whole sequence, plus the cached/uncached speedup),
// cache (KV cache lifecycle), switch (generate/score alternation under both
// cache policies), ll (scoring throughput), mc (multiple-choice scoring,
// packed and unpacked), roofline (stream bandwidth and oneDNN sgemm at the model's shapes).
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/report.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace kveval::bench {

/// Names accepted by --tests, in the order they run. "load", "dequant"
/// (load.hpp) and "gen-mixed" (gen.hpp) run only when named; an empty --tests runs the others.
const std::vector<std::string>& test_names();

/// The synthetic multiple-choice workload of test "mc": `docs` documents whose
/// contexts are a shared prefix of `prefix` tokens (BOS first) then `context`
/// tokens of their own, each with `choices` continuations of `choice_tokens` tokens.
struct McShape {
  int docs = 16;
  int prefix = 128;
  int context = 64;
  int choices = 4;
  int choice_tokens = 2;
};

/// What to measure. Lists are swept as a cross product, like llama-bench.
struct Options {
  std::string model_path;
  std::vector<int> threads;                 ///< thread counts (one model load each)
  std::vector<std::string> dtypes = {"auto"};  ///< compute dtypes (f32, bf16, auto; one model load each)
  std::vector<int> batches = {1};           ///< rows per forward (pp, tg, tg-nocache, ll)
  std::vector<int> n_prompt = {64, 512};    ///< pp: prompt tokens per row
  std::vector<int> n_gen = {16, 64, 256};   ///< tg/tg-nocache: generated tokens per row
  std::vector<int> tg_prompt = {16};        ///< tg/tg-nocache: prompt tokens before generating
  int repetitions = 5;                      ///< timed runs after one warm-up
  std::vector<std::string> tests;           ///< subset of test_names(); empty = all but load and dequant
  /// cache/scope: (batch, positions); positions are capped at the model's context length.
  std::vector<std::array<int, 2>> cache_shapes = {{{1, 512}}, {{4, 2048}}, {{8, 4096}}};
  int switch_rounds = 8;   ///< switch: timed rounds K per policy
  int switch_batch = 4;    ///< switch: rows B generated and scored per round
  int switch_prompt = 16;  ///< switch: prompt tokens per row
  int switch_gen = 32;     ///< switch: generated tokens per row G
  int ll_requests = 64;    ///< ll: synthetic requests per run
  McShape mc;              ///< mc: the workload
  int gen_mixed_prompts = 64;   ///< gen-mixed: prompts per run
  int gen_mixed_max_gen = 256;  ///< gen-mixed: max_gen_toks drawn uniformly in [1, this]
  int gen_mixed_rows = 8;       ///< gen-mixed: cache rows when -b holds no value >= 2
  /// KV-cache element types (f32, bf16, f16, auto), swept inside each model
  /// load (Model::set_kv_cache_dtype) by the tests that use a cache: tg, cache,
  /// switch and gen-mixed; the others run once per load, with the first.
  /// fidelity takes one value.
  std::vector<std::string> kv_cache_dtypes = {"auto"};
  /// How decode steps on kept Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks multiply: "exact" and/or "int8"
  /// (ModelOptions::matmul). run_bench runs the whole plan once per mode, in order, and each row records the
  /// mode its load used; when "int8" is listed, fidelity (run once) compares exact with int8 instead of f32
  /// with a reduced dtype.
  std::vector<std::string> matmul = {"exact"};
  /// --mmap: matrices kept in a file-block type read in place from the file's mapping
  /// (ModelOptions::map_weights) in every load.
  bool map_weights = false;
  size_t stream_bytes = 0; ///< roofline: read-bandwidth buffer (0 = backend::stream_buffer_bytes())
  uint64_t seed = 1;       ///< synthetic token ids
  std::string spec;        ///< fidelity: evaluation spec whose tasks are scored in f32 and bf16
};

/// Checks `o` (lists non-empty, values >= 1, known test names); throws ArgumentError naming the option.
void validate(const Options& o);

/// Runs every selected test at every thread count: validate, model_facts, then
/// execute(plan(...)) (plan.hpp) once per --matmul mode, the rows of each pass
/// appended in turn to one report (fidelity in the int8 pass when int8 is listed,
/// else in the only one). `progress` (may be empty) receives one line per
/// measurement; `info` (may be empty) the load summary line of each compute
/// dtype's first load. Throws what Model::load and the engine throw,
/// ArgumentError for invalid options.
Report run_bench(const Options& o, const std::function<void(const std::string&)>& progress = {},
                 const std::function<void(const std::string&)>& info = {});

/// The roofline's stream buffer under a memory budget: `wanted` when it fits
/// `available` (or the budget is unknown); else the largest whole MiB within
/// 7/8 of `available` when that is still >= `least` (4 x the last-level cache:
/// a smaller buffer would be read from cache); else 0 (skip the measurement).
size_t fit_stream_buffer(size_t wanted, std::optional<uint64_t> available, size_t least);

/// `batch` prompts of `n_prompt` tokens: BOS, then ids uniform in
/// [3, n_vocab) excluding BOS/EOS, deterministic from `seed` (mt19937_64).
std::vector<std::vector<int32_t>> synthetic_prompts(const Model& model, int batch, int n_prompt, uint64_t seed);

/// Most tokens of one of test mc's packed rows (capped at the context length):
/// max_length's usual value in lm-eval runs.
inline constexpr int kMcRowTokens = 2048;

/// The requests of test mc (ScoreRequest::pack set), document by document:
/// the prefix is synthetic_prompts(model, 1, prefix, seed); each document's own
/// part and each choice begin with a distinct id (3 + index), so that they
/// share nothing beyond the prefix and their document's context.
std::vector<ScoreRequest> mc_requests(const Model& model, const McShape& s, uint64_t seed);

/// What score() computes for mc_requests(s) in rows of at most `row_tokens`
/// tokens: requests, tokens requested (each request's tokens but its last),
/// tokens computed shared (the tries) and alone, and logit rows either way.
struct McCounts {
  int64_t requests = 0, requested = 0, computed_shared = 0, logit_rows_shared = 0, logit_rows_alone = 0;
};
McCounts mc_counts(const McShape& s, int row_tokens);

/// A measurement that could not be made as asked, for a reason of the model
/// (a row's logits turned NaN or Inf, e.g. an f16 KV cache overflowed): the
/// bench skips that measurement with a warning naming the reason and goes on.
struct MeasurementError : Error {
  using Error::Error;
};

/// Throws MeasurementError when a generation of `gens` stopped before its
/// `expected` tokens: "<what> stopped after N of M tokens in row R: non-finite
/// logits (NaN or Inf)[ (kv_f16_overflow_note)]". No-op when all are whole.
void require_whole(const std::vector<Generation>& gens, const std::vector<int>& expected, const std::string& what);

/// The generation the tg (cached = true: generate_greedy inside a
/// KvCacheScope of batch x (prompt + n_gen), CachePolicy::Reuse) or
/// tg-nocache (generate_greedy_uncached) tests time: exactly `n_gen` ids per
/// row (EOS does not stop). Leaves the cache disabled. Throws ArgumentError
/// if the prompts are ragged or prompt + n_gen exceeds the context length,
/// MeasurementError if a row stops early (non-finite logits).
std::vector<std::vector<int32_t>> bench_generate(Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                                 int n_gen, bool cached, GenerateTiming* timing = nullptr);

}  // namespace kveval::bench
