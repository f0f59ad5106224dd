#pragma once
// The state of a run over a loaded Model: its KV cache, activation buffers,
// RoPE table, counters and the forward pass; the cache scopes; scoring and
// greedy generation. Like llama.cpp's llama_context over a llama_model: one
// Model can serve several Contexts (used one at a time: they share its engine).
// Cache API names and meanings follow torchtune (modules/kv_cache.py,
// modules/common_utils.py): setup_caches, caches_are_setup,
// caches_are_enabled, reset_caches, delete_caches, local_kv_cache,
// disable_kv_cache.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/kv_cache.hpp"
#include "model/model.hpp"
#include "model/sampling.hpp"

namespace kveval {

/// Counters of a Context for instrumentation and tests (monotonic since it was made).
struct ContextStats {
  uint64_t forward_calls = 0;           ///< all forward passes
  uint64_t forward_cached = 0;          ///< passes that read/appended the cache
  uint64_t forward_with_cache_setup = 0;  ///< passes run while caches were set up (enabled or not)
  uint64_t cache_allocations = 0;       ///< setup_caches calls that allocated
  uint64_t buffer_allocations = 0;      ///< activation-buffer (re)allocations
  uint64_t tokens_processed = 0;        ///< token positions through the layer stack (tokens computed)
  uint64_t logit_rows = 0;              ///< rows of n_vocab logits materialised (output norm + output matmul)
  uint64_t kv_f16_overflows = 0;        ///< finite K/V values stored as ±Inf in an f16 cache (|x| >= 65520)
};

/// A run over `model`: a KvCache of the model's shape, the activation buffers
/// and the forward pass. Holds a reference to the model, which must outlive it.
class Context {
 public:
  /// A context over `model` with no caches set up, its KV-cache element type
  /// model.kv_cache_dtype().
  explicit Context(const Model& model);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// The model this context runs.
  const Model& model() const;

  // ---- KV cache (delegates to the context's KvCache) -----------------------
  // K and V are each [n_layer][batch][n_kv_head][cells][head_dim] of
  // kv_cache_dtype() (float32, bfloat16 or IEEE half). Positions are half-open: row r
  // has seen [0, n_past(r)); a global layer holds them all (cells = max_seq_len),
  // a sliding-window layer the last window - 1 + 128 at most (KvCache).

  /// Element type of the caches (F32, BF16 or F16, never Auto).
  KvCacheDtype kv_cache_dtype() const;
  /// Sets the element type of caches set up from now on (Auto: resolved against
  /// the model's compute dtype). Throws CacheError while caches are set up (delete them first).
  void set_kv_cache_dtype(KvCacheDtype d);

  /// llama.cpp's swa_full for caches set up from now on: true keeps every
  /// position in the sliding-window layers too (KvCache::set_swa_full; the
  /// same results, the memory of a cache without windows). Default false.
  /// Throws CacheError while caches are set up.
  void set_kv_cache_swa_full(bool full);
  bool kv_cache_swa_full() const;

  /// Allocates caches for `batch_size` rows of `max_seq_len` positions and
  /// enables them; every row starts at position 0. No zero-fill: pages are
  /// touched by the writes that use them. If caches of the same shape exist
  /// they are reused and reset; another shape is reallocated. Throws
  /// ArgumentError for sizes < 1 or max_seq_len > n_ctx_train.
  void setup_caches(int batch_size, int max_seq_len);
  /// True between setup_caches and delete_caches.
  bool caches_are_setup() const;
  /// True when forward passes read and append to the cache.
  bool caches_are_enabled() const;
  /// Turns cache use on/off for later forward passes. Enabling requires
  /// set-up caches (CacheError otherwise). Contents are kept.
  void set_caches_enabled(bool enabled);
  /// Rewinds every row to position 0 in O(1); no memory is written and bytes() is unchanged.
  void reset_caches();
  /// Rewinds row `row` to position 0.
  void reset_cache_row(int row);
  /// Frees the caches; afterwards caches_are_setup() is false and bytes() == 0.
  void delete_caches();
  /// Positions filled in row `row` (tokens). Throws ArgumentError if out of range.
  int n_past(int row) const;
  /// K/V values of row `row` stored as ±Inf by an f16 cache (|x| >= 65520)
  /// since the row was set up or last reset; 0 for other cache types. Throws
  /// ArgumentError if out of range.
  uint64_t kv_f16_overflows(int row) const;
  /// Positions per row (max_seq_len of setup_caches), 0 when not set up.
  int capacity() const;
  /// Rows (batch_size of setup_caches), 0 when not set up.
  int cache_batch_size() const;
  /// Bytes held by K and V caches together (0 when not set up).
  size_t bytes() const;
  /// Bytes a cache of this shape, of kv_cache_dtype() and kv_cache_swa_full() would take.
  size_t cache_bytes_for(int batch_size, int max_seq_len) const;
  /// Raw cache memory for tests: K (which=0) or V (which=1), nullptr if not
  /// set up. F32 caches only: throws CacheError for a BF16 or F16 cache.
  const float* cache_data(int which) const;
  /// The cache itself (read-only).
  const KvCache& kv_cache() const;

  // ---- forward ------------------------------------------------------------

  /// Which positions get logits.
  enum class Logits { All, Last };

  /// Runs the transformer.
  /// - `tokens`: [batch, seq] row-major token ids; `n_tokens`: [batch], the
  ///   valid length of each row (0 <= n_tokens[r] <= seq); the rest is padding
  ///   and never influences any result.
  /// - Caches disabled: row r is a fresh sequence at positions [0, n_tokens[r]);
  ///   no cache memory is read or written, and each row's logits are
  ///   bit-identical whatever the other rows are (batch-invariant matmuls).
  /// - Caches enabled: row r's tokens take positions [n_past(r), n_past(r)+n_tokens[r]),
  ///   attend to the cached positions and themselves, and are appended (n_past advances).
  /// - `logits_out`: Logits::All -> [batch, seq, n_vocab] (padding positions are 0);
  ///   Logits::Last -> [batch, n_vocab], the logits after each row's last valid
  ///   token (0 for rows with n_tokens 0). Unnormalised, natural-log scale.
  /// Throws CacheError when the cache would overflow (message gives the capacity
  /// needed) or batch > cache_batch_size(); ArgumentError for bad ids or sizes.
  void forward(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens,
               Logits mode, std::span<float> logits_out);

  /// One position whose logits forward_rows materialises: token `index` (0-based,
  /// < n_tokens[row]) of row `row`; its logits predict the token after it.
  struct LogitRow {
    int row = 0;
    int index = 0;
  };

  /// A row packed as a token tree (a trie of token sequences; prefix packing,
  /// cache-free only): tokens [0, trunk) are a causal trunk at positions
  /// [0, trunk); token trunk + i has the parent token parent[i] (an earlier
  /// index, or -1 for a root at position 0) and sits at RoPE position the
  /// parent's + 1, attending to its ancestors and itself, never to another
  /// node (backend::TreeMask). Without nodes (parent empty) the row is a plain
  /// causal sequence. Each node's result equals the one of its ancestors'
  /// tokens scored alone as one sequence: bit for bit where both take the loop
  /// attention (nodes always do; a causal row or trunk does up to 64 tokens
  /// on AVX-512, any length with head_dim < 32), otherwise up to float
  /// rounding of the attention.
  struct TokenTree {
    int trunk = 0;
    std::vector<int> parent;  ///< [n_tokens[row] - trunk], each < trunk + its index, or -1
  };

  /// Cache-free forward pass that materialises logits only at `at`:
  /// `tokens` [batch, seq], `n_tokens` [batch] as in forward(); `trees`: empty
  /// (every row a causal sequence) or [batch], each row's TokenTree;
  /// `logits_out` [at.size(), n_vocab]: row k holds the logits after token
  /// at[k] (the final norm, output matmul, logit scale and soft-cap run on
  /// those rows only). Bit-identical to the same rows of forward(Logits::All)
  /// (batch-invariant matmuls). Throws CacheError when caches are enabled;
  /// ArgumentError for bad ids, sizes, positions or trees.
  void forward_rows(std::span<const int32_t> tokens, int batch, int seq, std::span<const int> n_tokens,
                    std::span<const LogitRow> at, std::span<float> logits_out, std::span<const TokenTree> trees = {});

  /// Counters since this context was made (forward passes, cache use, allocations).
  const ContextStats& stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// What a KvCacheScope does with the allocation when it exits.
enum class CachePolicy {
  /// torchtune's local_kv_cache: caches must be absent on entry; set up on
  /// entry, deleted on exit (bytes() == 0 outside the scope). Best when scopes
  /// are rare or memory is tight.
  Release,
  /// Keep-and-reset: an existing allocation of the same shape (batch_size,
  /// max_seq_len) is reused and only rewound on entry; on exit the
  /// caches are disabled and reset but stay allocated. Best when scopes
  /// alternate often (RL rollouts, many eval tasks).
  Reuse,
};
/// "release" / "reuse"; parse throws ArgumentError for anything else.
const char* to_string(CachePolicy p);
CachePolicy parse_cache_policy(const std::string& s);

/// RAII scope like torchtune's `local_kv_cache`. With CachePolicy::Release it
/// refuses (CacheError) if caches already exist, sets them up for
/// `batch_size` x `max_seq_len` and enables them; on exit (normal or
/// exception) disables and deletes them (bytes() == 0). With Reuse see above.
class KvCacheScope {
 public:
  KvCacheScope(Context& ctx, int batch_size, int max_seq_len, CachePolicy policy = CachePolicy::Release);
  ~KvCacheScope();
  KvCacheScope(const KvCacheScope&) = delete;
  KvCacheScope& operator=(const KvCacheScope&) = delete;

 private:
  Context& ctx_;
  CachePolicy policy_;
};

/// RAII scope like torchtune's `disable_kv_cache`: requires set-up caches
/// (CacheError otherwise), disables them, and restores the previous enabled
/// state on exit. Cache contents are untouched.
class KvCacheDisabled {
 public:
  explicit KvCacheDisabled(Context& ctx);
  ~KvCacheDisabled();
  KvCacheDisabled(const KvCacheDisabled&) = delete;
  KvCacheDisabled& operator=(const KvCacheDisabled&) = delete;

 private:
  Context& ctx_;
  bool was_enabled_;
};

// ---- scoring and generation ------------------------------------------------

/// Why a generation stopped.
enum class StopReason { Eos, MaxTokens, ContextFull, StopString, NonFinite };
/// "eos", "max_gen_toks", "context full", "until", "non-finite logits".
const char* to_string(StopReason r);


/// log-softmax of one row of logits at `token`: logits[token] - logsumexp(logits), nats.
/// NaN when any logit of the row is NaN or ±Inf (an overflowed forward pass):
/// callers treat a non-finite result as a failed request, never as a score.
double token_logprob(std::span<const float> logits, int32_t token);
/// Index of the largest logit (first one on ties).
int32_t argmax(std::span<const float> logits);

/// One sequence to score: `tokens` (usually starting with BOS); positions
/// [score_from, tokens.size()) are scored, each given everything before it.
struct ScoreRequest {
  std::vector<int32_t> tokens;
  int score_from = 1;  ///< first scored position, >= 1
  /// Scored as a token tree (every query through the loop attention, whose
  /// bits depend only on the query's own ancestors), so it may share the
  /// positions of its common prefix with the other `pack` requests of a row
  /// (ScoreOptions::share_prefixes) and get the same bits alone or shared.
  bool pack = false;
};
/// Result of scoring: per scored position its log-prob (nats) and whether it was the argmax.
struct ScoreResult {
  std::vector<double> logprobs;
  std::vector<uint8_t> is_greedy;
  /// First token position (index into ScoreRequest::tokens) whose logits were
  /// not finite (NaN/Inf); -1 when all were. Scoring of the request stopped
  /// there: logprobs/is_greedy hold only the positions before it.
  int nonfinite_at = -1;
  /// Sum of `logprobs` (nats): the continuation's log-likelihood.
  double sum() const;
  /// True when every scored position was the argmax (lm-eval's is_greedy).
  bool all_greedy() const;
};
/// How score() forms its rows.
struct ScoreOptions {
  /// true: `pack` requests share rows as tries of their tokens; false: each
  /// request alone in its row (the same bits, more tokens computed).
  bool share_prefixes = true;
  /// Most tokens of a shared row; 0 (or more than the model's context
  /// length): the context length.
  int row_tokens = 0;
  /// Most scored tokens of a shared row (the sum over its requests of size -
  /// score_from, a bound on its logits rows); 0: no limit. A request above
  /// either limit gets a row of its own.
  int row_scored = 0;
};
/// Scores `requests` cache-free in one Context::forward_rows pass per batch of
/// up to `batch_size` rows (caches must be disabled or absent: CacheError
/// otherwise), logits only at the positions that predict a scored token (one
/// logits row per distinct position). A row is one request, over its tokens
/// [0, size - 1) (the last token is only a target, so a request may hold
/// context_length + 1 tokens), or with opts.share_prefixes a trie of `pack`
/// requests (Context::TokenTree, trunk 0): the requests sorted by their tokens,
/// each row taking the next ones while its trie (tokens [0, size - 1) of each,
/// a common prefix once) holds at most opts.row_tokens tokens and its requests at
/// most opts.row_scored scored tokens. A `pack`
/// request's every query takes the loop attention, so its log-probs and
/// is_greedy are bit-identical alone, shared, at any batch_size and thread
/// count (where the matmuls are batch-invariant: f32; bf16 without AMX).
/// Rows depend only on the requests and opts, never on batch_size or their
/// order. Throws ArgumentError for a longer request or score_from outside [1, size].
std::vector<ScoreResult> score(Context& ctx, std::span<const ScoreRequest> requests, int batch_size,
                               const ScoreOptions& opts = {});

/// The rows score() forms (request indices of each, in the order it runs
/// them: requests alone in their order, then the shared rows) on a model of
/// context length `n_ctx`; never throws.
std::vector<std::vector<size_t>> score_rows(std::span<const ScoreRequest> requests, int n_ctx,
                                            const ScoreOptions& opts = {});

/// The shape of one forward pass score() runs: rows, the longest row (seq),
/// the tokens computed and the logit rows materialised.
struct ScorePassShape {
  int rows = 0;
  int seq = 0;
  int64_t tokens = 0;
  int64_t logit_rows = 0;
};
/// The passes score(ctx, requests, batch_size, opts) runs on a model of context
/// length `n_ctx` (for memory plans and counters); never throws.
std::vector<ScorePassShape> score_pass_shapes(std::span<const ScoreRequest> requests, int batch_size, int n_ctx,
                                              const ScoreOptions& opts = {});

/// How generate_greedy schedules more prompts than the cache has rows.
enum class Batching {
  /// Groups of cache_batch_size() prompts in order; a group is prefilled
  /// together and decoded until its last row ends (a row that stopped keeps its
  /// slot idle until then).
  Static,
  /// Continuous batching: as soon as a row ends, its cache row is rewound
  /// (reset_cache_row) and the next waiting prompt is prefilled into it in the
  /// same forward pass in which the other rows decode their next token.
  Dynamic,
};
/// "static" / "dynamic".
const char* to_string(Batching b);

/// One prompt's generation. A prompt whose logits became non-finite (NaN/Inf)
/// stops with StopReason::NonFinite: the bad token is not appended, and the
/// position it would have taken is prompt_tokens + ids.size(). Other rows are
/// not affected.
struct Generation {
  std::vector<int32_t> ids;       ///< generated ids (EOS included if produced)
  std::vector<double> logprobs;   ///< log-prob (nats) of each generated id (empty unless GenerateOptions::logprobs)
  StopReason reason = StopReason::MaxTokens;
  int prompt_tokens = 0;
  /// With StopReason::NonFinite: the K/V values of its cache row that an f16
  /// cache stored as ±Inf (Context::kv_f16_overflows), the likely cause when > 0.
  uint64_t kv_f16_overflows = 0;
};

/// The cause to report for a row that stopped with StopReason::NonFinite after
/// `overflows` (> 0) of its K/V values overflowed an f16 cache: "N K/V value(s)
/// of its cache row exceeded the f16 KV cache's range of ±65504; use
/// --kv-cache-dtype bf16 or f32". One wording for `run` and `generate`.
std::string kv_f16_overflow_note(uint64_t overflows);
/// The key of one prompt's draws (sample_uniform): the request it serves, global
/// to the run (never a row, batch or shard index), and its repeat.
struct SampleKey {
  uint64_t request = 0;
  uint32_t repeat = 0;
};

/// Options of generation (greedy unless `sampling` says otherwise).
struct GenerateOptions {
  /// Tokens to generate at most, per prompt (one value, or one per prompt).
  std::vector<int> max_gen_toks = {256};
  /// Stop a row at EOS or EOT (Tokenizer::is_eog), with StopReason::Eos.
  bool stop_at_eos = true;
  /// Called after each generated token (also the max_gen_toks-th; not after
  /// EOS when stop_at_eos) with the prompt's index and all its generated ids;
  /// returning true stops that prompt with StopReason::StopString.
  std::function<bool(int index, std::span<const int32_t> generated)> should_stop;
  /// Compute Generation::logprobs (a log-sum-exp over the vocabulary per
  /// token). false: logprobs stays empty and each token costs one fused
  /// argmax + finiteness scan (what `kveval run` needs).
  bool logprobs = true;
  /// Decoding of each prompt (one value, or one per prompt); the default is
  /// greedy. A sampled token of prompt i at step n (its n-th generated token,
  /// from 0) is sample_token(logits, sampling[i], sample_uniform(seed,
  /// key.request, key.repeat, n)): the same whatever the batching or threads.
  std::vector<SamplingParams> sampling = {SamplingParams{}};
  /// One key per prompt; empty: prompt i has the key {i, 0}.
  std::vector<SampleKey> sample_keys;
  /// generate_greedy only: scheduling of prompts over the cache rows. Results
  /// do not depend on it (same ids, reasons and counts; log-probs equal up to
  /// float rounding of differently sized matmuls).
  Batching batching = Batching::Dynamic;
  /// generate_greedy only, optional: called in prompt order just before prompt
  /// `index` takes a cache row (or finishes without one, max_gen_toks 0); may throw.
  std::function<void(size_t index)> on_admit;
  /// Optional: called once per prompt when its generation is complete.
  std::function<void(size_t index, const Generation& g)> on_finish;
};
/// Where generation time went (seconds of wall time, tokens processed).
struct GenerateTiming {
  /// Forward passes over the prompts. A dynamic-batching pass that prefills
  /// some rows while others decode is split between prefill and decode in
  /// proportion to the tokens of each kind it ran.
  double prefill_seconds = 0;
  double decode_seconds = 0;    ///< one-token steps (incl. sampling and stop checks)
  int64_t prefill_tokens = 0;   ///< prompt tokens run through the model
  int64_t decode_tokens = 0;    ///< tokens generated
  int64_t forward_passes = 0;   ///< forward passes run (prefill, decode and mixed)
};

/// Decoding (greedy, or seeded sampling by opts.sampling) of any number of `prompts` (token ids, BOS included by the
/// caller) in the set-up, enabled cache, rows = min(prompts, cache_batch_size()):
/// each prompt takes a cache row (rewound first), is prefilled, then decodes one
/// token per step together with the other busy rows; opts.batching says when
/// free rows are refilled. A prompt stops on EOS, its max_gen_toks,
/// `should_stop`, when its cache row is full ("context full"), or with
/// StopReason::NonFinite when its logits are not finite. Results are in prompt
/// order; each prompt runs at its own positions [0, n) of its row, attending
/// only to itself, as if generated alone (only the rounding of matmuls over
/// other row counts differs: log-probs agree to ~1e-6 nats). Throws CacheError
/// if caches are not set up/enabled or a prompt is longer than capacity();
/// ArgumentError for an empty prompt, bad max_gen_toks, sampling or sample_keys
/// counts; what the callbacks throw.
std::vector<Generation> generate_greedy(Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                        const GenerateOptions& opts, GenerateTiming* timing = nullptr);

/// Same result without a cache: every step re-runs the whole sequence
/// (for cached-vs-uncached comparisons). Caches must be disabled or absent.
std::vector<Generation> generate_greedy_uncached(Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& opts, int max_seq_len,
                                                 GenerateTiming* timing = nullptr);

}  // namespace kveval
