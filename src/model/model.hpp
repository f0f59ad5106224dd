#pragma once
// Llama-family transformers (llama, qwen2, qwen3: model/arch/) on oneDNN
// with a caller-managed KV cache.
// Cache API names and meanings follow torchtune (modules/kv_cache.py,
// modules/common_utils.py): setup_caches, caches_are_setup,
// caches_are_enabled, reset_caches, delete_caches, local_kv_cache,
// disable_kv_cache. Tensor names and GGUF keys follow llama.cpp.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "model/arch/arch.hpp"
#include "model/dequantize.hpp"
#include "model/load_summary.hpp"
#include "model/tokenizer.hpp"

namespace kveval {

namespace gguf {
class File;
}

/// Hyper-parameters read from the GGUF `{arch}.*` keys (arch =
/// general.architecture; see model/arch/arch.hpp for the architectures).
struct HParams {
  std::string arch = "llama";  ///< general.architecture: llama, qwen2, qwen3
  int n_vocab = 0;        ///< tokens in the vocabulary (rows of token_embd)
  int n_embd = 0;         ///< {arch}.embedding_length
  int n_layer = 0;        ///< {arch}.block_count
  int n_head = 0;         ///< {arch}.attention.head_count
  int n_head_kv = 0;      ///< {arch}.attention.head_count_kv (GQA), default n_head
  int n_ff = 0;           ///< {arch}.feed_forward_length
  int n_ctx_train = 0;    ///< {arch}.context_length (positions)
  /// Dimensions of one query/key/value head: {arch}.attention.key_length
  /// (= value_length), default n_embd / n_head. 0 means n_embd / n_head.
  int n_embd_head = 0;
  int n_rot = 0;          ///< {arch}.rope.dimension_count, default head_dim
  float rope_freq_base = 10000.0f;  ///< {arch}.rope.freq_base
  /// 1 / {arch}.rope.scaling.factor for linear scaling (llama.cpp's rope_freq_scale); 1 = none.
  float rope_freq_scale = 1.0f;
  bool rope_freq_factors = false;   ///< rope_freqs.weight present (Llama 3.1+ frequency factors)
  arch::RopeStyle rope_style = arch::RopeStyle::Normal;  ///< pair layout of the architecture
  float rms_eps = 1e-5f;            ///< {arch}.attention.layer_norm_rms_epsilon
  bool tied_output = false;         ///< no `output.weight`: logits use token_embd
  bool qkv_bias = false;            ///< attn_q/k/v biases present
  bool qk_norm = false;             ///< per-head RMSNorm of Q and K (attn_q_norm, attn_k_norm)
  int head_dim() const { return n_embd_head > 0 ? n_embd_head : n_embd / n_head; }
  /// Width of all query heads together: rows of attn_q, columns of attn_output.
  int n_embd_q() const { return n_head * head_dim(); }
};

/// Compute dtype of weights and matmuls. F32: exact. BF16: weights stored in
/// bfloat16, matmuls in oneDNN bf16 kernels with f32 accumulation and output
/// (norms, softmax, RoPE, residuals, log-softmax stay f32). Q8_0: the file's
/// Q8_0 matrices stay as blocks (1.0625 bytes per weight) and are multiplied in
/// f32 (decode: backend's Q8_0 kernel; longer products: f32 sgemm on widened
/// chunks), other matrices load as F32; exact to f32 rounding against the
/// file's dequantized values. Q4_0: the same for the file's Q4_0 matrices
/// (ggml-common.h block_q4_0: 0.625 bytes per weight held, 4-bit quants and an
/// f32 scale per 32). Auto: see resolve_dtype.
enum class ComputeDtype { F32, BF16, Auto, Q8_0, Q4_0 };
/// "f32" / "bf16" / "auto" / "q8_0" / "q4_0".
const char* to_string(ComputeDtype d);
/// Parses "f32", "bf16", "q8_0", "q4_0" or "auto"; throws ArgumentError naming `what` otherwise.
ComputeDtype parse_compute_dtype(const std::string& s, const std::string& what = "--dtype");
/// Resolves a request: Auto -> Q8_0 when every matrix but token_embd is Q8_0
/// (`file_q8_0`) and the CPU has no bf16 (on AVX2 the alternative is f32 at 4x
/// the bytes), else BF16 when `cpu_bf16` (oneDNN's effective ISA
/// >= avx512_core_bf16) and the file is not F32 (`file_f32`: every matrix
/// F32), else F32; explicit dtypes are kept as asked. Auto never picks Q4_0
/// (a Q4_0 file loads as bf16 or f32 unless q4_0 is asked for).
ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32, bool file_q8_0 = false);

/// The dtype `requested` resolves to for the GGUF file at `path` on this CPU, as
/// Model::load resolves it (reads the header and tensor table only; explicit
/// dtypes are returned as asked). Throws what opening a gguf::File throws
/// (IoError, FormatError).
ComputeDtype resolve_dtype_for_file(const std::string& path, ComputeDtype requested);

/// Element type of the KV cache. F32: K and V as the forward pass computed
/// them (cached decoding matches cache-free passes to f32 rounding). BF16:
/// bfloat16 (round to nearest even, util/bf16.hpp), half the bytes; attention
/// widens each element exactly as it reads it. F16: IEEE half (round to
/// nearest even, util/half.hpp; llama.cpp's default `-ctk f16 -ctv f16`), half
/// the bytes with 3 more significand bits than bf16 but a range of ±65504: a
/// K or V value with |x| >= 65520 (which rounds past 65504) is stored as ±Inf (counted in
/// ModelStats::kv_f16_overflows), and that row's logits become non-finite.
/// Auto: BF16 when the compute dtype is BF16 (vLLM's `--kv-cache-dtype auto`:
/// the model's dtype), else F32.
enum class KvCacheDtype { Auto, F32, BF16, F16 };
/// "auto" / "f32" / "bf16" / "f16".
const char* to_string(KvCacheDtype d);
/// Parses "auto", "f32", "bf16" or "f16"; throws ArgumentError naming `what` otherwise.
KvCacheDtype parse_kv_cache_dtype(const std::string& s, const std::string& what = "--kv-cache-dtype");
/// Auto -> BF16 for a BF16 compute dtype, else F32; F32, BF16 and F16 are kept.
KvCacheDtype resolve_kv_cache_dtype(KvCacheDtype requested, ComputeDtype compute);

/// Bytes the weights of `f` will take once loaded as `dtype` (dtype_size
/// bytes per element of every tensor, whatever its type in the file, plus the
/// transposed copy of token_embd when the output is tied). Model::load checks
/// it against the memory budget before converting anything. Within a few
/// percent of the resident bytes (matrices whose rows are 4 KiB multiples get
/// 16 elements of padding per row).
/// With `kept` q8_0 or q4_0 (the compute dtype), that type's matrices other
/// than token_embd count as blocks (backend::blocks_bytes: 1.125 or 0.625 bytes
/// per element, quants and an f32 scale per 32), a tied output from such a
/// token_embd too, and a part of a fused projection (attn_q/k/v, ffn_gate/up)
/// only when every part is of that type (the loader widens the whole fused
/// matrix otherwise); any other `kept` keeps nothing.
uint64_t estimate_weight_bytes(const gguf::File& f, DType dtype = DType::F32, ComputeDtype kept = ComputeDtype::F32);

/// Most compute threads a command accepts (the spec's `threads` bound).
inline constexpr int kMaxThreads = 4096;

/// Options for loading a model.
struct ModelOptions {
  int threads = 0;  ///< compute threads; 0 = all cores; at most kMaxThreads
  /// Compute dtype (Auto resolved at load by resolve_dtype). The weight
  /// matrices are converted to it at load (dequantize_rows' target DType:
  /// F32 or BF16); token embeddings and norm weights stay F32.
  ComputeDtype dtype = ComputeDtype::F32;
  /// KV-cache element type (Auto resolved at load by resolve_kv_cache_dtype
  /// against the resolved compute dtype); Model::set_kv_cache_dtype changes it later.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Auto;
  /// Refuse weights holding NaN or Inf (FormatError naming the tensor and the
  /// first bad element); checked while converting, in the same pass.
  bool check_finite = true;
  /// Compute the SHA-256 of the file bytes while loading (Model::sha256()).
  bool hash = true;
  /// Check weights against the memory budget (util/memory.hpp) before copying them.
  bool check_memory = true;
  /// Test hook: called with "mapped" after the file is mapped and its header
  /// read (before hashing), and with "copy" just before the first tensor is
  /// copied (after the size re-check). Tests change the file there.
  std::function<void(const char* stage)> on_load_stage = {};
};

/// Why a generation stopped.
enum class StopReason { Eos, MaxTokens, ContextFull, StopString, NonFinite };
/// "eos", "max_gen_toks", "context full", "until", "non-finite logits".
const char* to_string(StopReason r);

/// Counters for instrumentation and tests (monotonic since load).
struct ModelStats {
  uint64_t forward_calls = 0;           ///< all forward passes
  uint64_t forward_cached = 0;          ///< passes that read/appended the cache
  uint64_t forward_with_cache_setup = 0;  ///< passes run while caches were set up (enabled or not)
  uint64_t cache_allocations = 0;       ///< setup_caches calls that allocated
  uint64_t buffer_allocations = 0;      ///< activation-buffer (re)allocations
  uint64_t tokens_processed = 0;        ///< token positions through the layer stack
  uint64_t kv_f16_overflows = 0;        ///< finite K/V values stored as ±Inf in an f16 cache (|x| >= 65520)
};

class Model {
 public:
  /// Loads a GGUF model of a supported architecture (arch::all()),
  /// dequantizing every tensor (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
  /// Q2_K..Q6_K) to the compute dtype (opts.dtype resolved:
  /// F32 or BF16). Throws FormatError naming the file and
  /// the key/tensor at fault: an unsupported architecture, rope scaling type,
  /// tensor type or mixture of experts is refused by name, so is a tensor the
  /// architecture does not use; non-finite weights are refused naming the
  /// tensor and the first bad element.
  /// Hyper-parameters are range-checked by key. Also FormatError "file changed
  /// while loading" when the file is truncated or rewritten during the load
  /// (checked by size and mtime before and after copying; a SIGBUS from a
  /// truncated mapping is caught); MemoryError when the weights
  /// (estimate_weight_bytes) exceed the memory budget; ArgumentError for
  /// threads outside [0, kMaxThreads].
  static std::unique_ptr<Model> load(const std::string& path, const ModelOptions& opts = {});
  ~Model();

  /// Hyper-parameters read at load.
  const HParams& hparams() const;
  /// The tokenizer of the GGUF file.
  const Tokenizer& tokenizer() const;
  /// The GGUF file this model was loaded from.
  const std::string& path() const;
  /// Compute threads in use (ModelOptions::threads resolved; 0 became all cores).
  int threads() const;
  /// Bytes of weights held in memory (matrices in the compute dtype, embeddings
  /// and norms F32), the tied output's copy of token_embd not counted.
  size_t weight_bytes() const;
  /// What the load found and produced (the `load:` line of run/generate/bench).
  const LoadSummary& load_summary() const;
  /// Resolved compute dtype (F32, BF16, Q8_0 or Q4_0, never Auto).
  ComputeDtype dtype() const;
  /// How the dtype was chosen, e.g. "auto -> f32: file is F32 (oneDNN ISA avx512_core_bf16)".
  const std::string& dtype_note() const;
  /// SHA-256 (64 hex digits) of the file bytes this model was loaded from,
  /// computed at load from the same mapping the weights were copied from;
  /// "" when ModelOptions::hash was false.
  const std::string& sha256() const;
  /// Bytes a forward pass of `rows` x `seq` tokens (cache-free) allocates:
  /// the activation buffers ([T] x (n_embd, qkv, n_ff...) floats, T = the
  /// valid tokens packed, `tokens`, default rows * seq), the attention scores
  /// of one sequence ([group, seq, seq]), and the caller's logits array
  /// ([rows, seq, n_vocab] for all_logits, else [rows, n_vocab]). For
  /// planning memory before a run.
  size_t activation_bytes_for(int rows, int seq, bool all_logits, int64_t tokens = -1) const;

  // ---- KV cache -----------------------------------------------------------
  // K and V are each [n_layer][batch][n_kv_head][max_seq][head_dim] of
  // kv_cache_dtype() (float32, bfloat16 or IEEE half). Positions are half-open: row r
  // holds [0, n_past(r)).

  /// Element type of the caches (F32, BF16 or F16, never Auto).
  KvCacheDtype kv_cache_dtype() const;
  /// Sets the element type of caches set up from now on (Auto: resolved against
  /// the compute dtype). Throws CacheError while caches are set up (delete them first).
  void set_kv_cache_dtype(KvCacheDtype d);

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
  /// Bytes a cache of this shape would take.
  size_t cache_bytes_for(int batch_size, int max_seq_len) const;
  /// Raw cache memory for tests: K (which=0) or V (which=1), nullptr if not
  /// set up. F32 caches only: throws CacheError for a BF16 cache.
  const float* cache_data(int which) const;

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

  /// Counters since load (forward passes, cache use, allocations).
  const ModelStats& stats() const;
  /// Backend counters: oneDNN primitives created so far.
  uint64_t primitives_created() const;
  /// Backend counters: engine buffer (re)allocations so far (scratchpad, padding, bf16 activations).
  uint64_t backend_allocations() const;

 private:
  Model();
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
  KvCacheScope(Model& model, int batch_size, int max_seq_len, CachePolicy policy = CachePolicy::Release);
  ~KvCacheScope();
  KvCacheScope(const KvCacheScope&) = delete;
  KvCacheScope& operator=(const KvCacheScope&) = delete;

 private:
  Model& model_;
  CachePolicy policy_;
};

/// RAII scope like torchtune's `disable_kv_cache`: requires set-up caches
/// (CacheError otherwise), disables them, and restores the previous enabled
/// state on exit. Cache contents are untouched.
class KvCacheDisabled {
 public:
  explicit KvCacheDisabled(Model& model);
  ~KvCacheDisabled();
  KvCacheDisabled(const KvCacheDisabled&) = delete;
  KvCacheDisabled& operator=(const KvCacheDisabled&) = delete;

 private:
  Model& model_;
  bool was_enabled_;
};

// ---- scoring and generation ------------------------------------------------

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
};
/// Result of scoring: per scored position its log-prob (nats) and whether it was the argmax.
struct ScoreResult {
  std::vector<double> logprobs;
  std::vector<uint8_t> is_greedy;
  /// First token position (index into ScoreRequest::tokens) whose logits were
  /// not finite (NaN/Inf); -1 when all were. Scoring of the request stopped
  /// there: logprobs/is_greedy hold only the positions before it.
  int nonfinite_at = -1;
  double sum() const;
  bool all_greedy() const;
};
/// Scores `requests` cache-free in one forward pass per batch of up to
/// `batch_size` rows (caches must be disabled or absent: CacheError otherwise).
/// The pass runs over tokens [0, size - 1) of each request (the last token is
/// only a target), so a request may hold context_length + 1 tokens.
/// Throws ArgumentError for a longer request or score_from outside [1, size].
std::vector<ScoreResult> score(Model& model, std::span<const ScoreRequest> requests, int batch_size);

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
  /// cache stored as ±Inf (Model::kv_f16_overflows), the likely cause when > 0.
  uint64_t kv_f16_overflows = 0;
};

/// The cause to report for a row that stopped with StopReason::NonFinite after
/// `overflows` (> 0) of its K/V values overflowed an f16 cache: "N K/V value(s)
/// of its cache row exceeded the f16 KV cache's range of ±65504; use
/// --kv-cache-dtype bf16 or f32". One wording for `run` and `generate`.
std::string kv_f16_overflow_note(uint64_t overflows);
/// Options of greedy generation.
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

/// Greedy decoding of any number of `prompts` (token ids, BOS included by the
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
/// ArgumentError for an empty prompt or bad max_gen_toks; what the callbacks throw.
std::vector<Generation> generate_greedy(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                        const GenerateOptions& opts, GenerateTiming* timing = nullptr);

/// Same result without a cache: every step re-runs the whole sequence
/// (for cached-vs-uncached comparisons). Caches must be disabled or absent.
std::vector<Generation> generate_greedy_uncached(Model& model, const std::vector<std::vector<int32_t>>& prompts,
                                                 const GenerateOptions& opts, int max_seq_len,
                                                 GenerateTiming* timing = nullptr);

}  // namespace kveval
