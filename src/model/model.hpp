#pragma once
// Llama-family transformers (llama, qwen2, qwen3: model/arch/) on oneDNN:
// the loaded model (weights, tokenizer, engine). The run state (KV cache,
// activations, forward) is a Context (model/context.hpp), the cache itself a
// KvCache (model/kv_cache.hpp), as llama.cpp splits llama_model,
// llama_context and llama_kv_cache. Tensor names and GGUF keys follow llama.cpp.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/arch/arch.hpp"
#include "model/compute_dtypes.hpp"
#include "model/dequantize.hpp"
#include "model/kv_cache.hpp"
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
  bool rope_freq_factors = false;   ///< per-pair frequency divisors in use (rope_freqs.weight, or a LongRoPE set)
  /// {arch}.rope.scaling.original_context_length (default n_ctx_train): LongRoPE's switch point.
  int n_ctx_orig = 0;
  /// LongRoPE (Phi-3): the factor set in use: "long", "short", or "" when the file has none.
  std::string rope_factors_set;
  float rope_attn_factor = 1.0f;    ///< cos and sin of RoPE times it ({arch}.rope.scaling.attn_factor; 1 = none)
  arch::RopeStyle rope_style = arch::RopeStyle::Normal;  ///< pair layout of the architecture
  float rms_eps = 1e-5f;            ///< {arch}.attention.layer_norm_rms_epsilon
  bool tied_output = false;         ///< no `output.weight`: logits use token_embd
  bool qkv_bias = false;            ///< attn_q/k/v biases present
  bool qk_norm = false;             ///< per-head RMSNorm of Q and K (attn_q_norm, attn_k_norm)
  // The recipe's numbers (arch::Description), resolved at load; 0 = off.
  float embd_scale = 0.0f;      ///< embedding rows multiplied by it
  float residual_scale = 0.0f;  ///< each block's attention and FFN output multiplied by it before the residual add
  float attn_scale = 0.0f;      ///< attention score multiplier (0: 1 / sqrt(head_dim))
  float attn_softcap = 0.0f;    ///< attention scores soft-capped: c tanh(s / c)
  int sliding_window = 0;       ///< positions a sliding layer's query sees, itself included
  float logit_scale = 0.0f;     ///< logits divided by it
  float final_softcap = 0.0f;   ///< logits soft-capped: c tanh(l / c)
  float rope_freq_base_swa = 10000.0f;  ///< RoPE base of the sliding layers (rope_freq_base unless the recipe says otherwise)
  float rope_freq_scale_swa = 1.0f;     ///< linear rope scaling of the sliding layers (1 = none)
  int head_dim() const { return n_embd_head > 0 ? n_embd_head : n_embd / n_head; }
  /// Width of all query heads together: rows of attn_q, columns of attn_output.
  int n_embd_q() const { return n_head * head_dim(); }
};

/// The row's name: "f32" / "bf16" / "auto" / "q8_0" / "q4_0" / "blocks" / "blocks-bf16".
const char* to_string(ComputeDtype d);
/// Parses a name of kComputeDtypes ("f32", "bf16", "q8_0", "q4_0", "blocks", "blocks-bf16" or "auto"); throws ArgumentError naming
/// `what` and listing the names otherwise.
ComputeDtype parse_compute_dtype(const std::string& s, const std::string& what = "--dtype");
/// Resolves a request: Auto -> BlocksBf16 when `cpu_bf16` (else Blocks) when every
/// matrix of the file (token_embd included) is of a type with a kept-block kernel
/// (`file_all_kept`: every quantized type kveval reads, Q8_0 ... Q6_K, mixed or not),
/// so the file stays resident at about its size and scores at bf16 speed; else the
/// kComputeDtypes row with auto_candidate that
/// keeps `file_type` (the one GGUF type of every matrix but token_embd, when
/// they share one: Q8_0) when the CPU has no bf16 (on AVX2 the alternative is
/// f32 at 4x the bytes), else BF16 when `cpu_bf16` (oneDNN's effective ISA
/// >= avx512_core_bf16) and the file is not F32 (`file_f32`: every matrix
/// F32), else F32; explicit dtypes are kept as asked.
ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32,
                           std::optional<gguf::TensorType> file_type, bool file_all_kept = false);
/// resolve_dtype with `file_q8_0` standing for a file whose matrices but token_embd are all Q8_0.
ComputeDtype resolve_dtype(ComputeDtype requested, bool cpu_bf16, bool file_f32, bool file_q8_0 = false);

/// The dtype `requested` resolves to for the GGUF file at `path` on this CPU, as
/// Model::load resolves it (reads the header and tensor table only; explicit
/// dtypes are returned as asked). Throws what opening a gguf::File throws
/// (IoError, FormatError).
ComputeDtype resolve_dtype_for_file(const std::string& path, ComputeDtype requested);

/// How decode steps on kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks multiply (backend::MatmulMode):
/// Exact (f32, the default) or Int8 (llama.cpp's int8 activations; docs/dtypes.md).
using MatmulMode = backend::MatmulMode;
/// Parses "exact" or "int8"; throws ArgumentError naming `what` otherwise.
MatmulMode parse_matmul_mode(const std::string& s, const std::string& what = "--matmul");

/// Auto -> the compute dtype row's kv_cache (BF16 for bf16, else F32); F32, BF16 and F16 are kept.
KvCacheDtype resolve_kv_cache_dtype(KvCacheDtype requested, ComputeDtype compute);

/// Bytes the weights of `f` will take once loaded as `dtype` (dtype_size
/// bytes per element of every tensor, whatever its type in the file, plus the
/// transposed copy of token_embd when the output is tied). Model::load checks
/// it against the memory budget before converting anything. Within a few
/// percent of the resident bytes (matrices whose rows are 4 KiB multiples get
/// 16 elements of padding per row).
/// With `kept` a compute dtype whose row keeps a storage type (q8_0, q4_0, blocks, blocks-bf16), that
/// type's matrices count as blocks (matrix_bytes: the file's bytes, Q8_0 1.0625
/// and Q4_0 0.5625 per element), token_embd too (a tied output
/// then adds nothing: it multiplies those blocks), and a part of a fused projection (attn_q/k/v, ffn_gate/up)
/// only when every part is of a kept type, each in its own blocks (the loader widens the whole fused
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
  /// against the resolved compute dtype): the element type each new Context starts
  /// with; Context::set_kv_cache_dtype changes a context's.
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Auto;
  /// How decode steps on kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks multiply (the
  /// engine's backend::MatmulMode); recorded in the load summary.
  MatmulMode matmul = MatmulMode::Exact;
  /// Refuse weights holding NaN or Inf (FormatError naming the tensor and the
  /// first bad element); checked while converting, in the same pass.
  bool check_finite = true;
  /// Compute the SHA-256 of the file bytes while loading (Model::sha256()).
  bool hash = true;
  /// Check weights against the memory budget (util/memory.hpp) before copying them.
  bool check_memory = true;
  /// Matrices kept in their blocks (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K…Q6_K) read in place from the mapped file
  /// (backend::Weight::view_file_blocks, nothing copied; the file must not change while the model lives).
  /// Off by default: the copy lives on huge pages, and decode on the mapping's 4 KiB pages streams less of
  /// the machine's memory read (Zen 4, Llama-3.2-1B shape, Q4_K_M, int8, 2 threads, frac_of_stream: 0.92-0.96
  /// mapped against 1.04-1.05 copied in two alternating pairs of tg64; 0.63 in a tg128 run), for a load of
  /// 0.3-0.4 s instead of 0.5-1.9 s. The CLI's --mmap and the spec's "mmap"; LoadSummary::mapped_bytes
  /// counts what was read in place.
  bool map_weights = false;
  /// Test hook: called with "mapped" after the file is mapped and its header
  /// read (before hashing), and with "copy" just before the first tensor is
  /// copied (after the size re-check). Tests change the file there.
  std::function<void(const char* stage)> on_load_stage = {};
  /// The architecture recipe to load the file with instead of the registry's
  /// for its general.architecture (the recipe's name is the key prefix);
  /// nullptr = the registry's. For tests of recipe features.
  const arch::Description* recipe = nullptr;
  /// The context the run uses (positions: a spec's max_length, generate's
  /// --max-length; the callers check it against context_length), >= 0; 0 = the
  /// model's context_length. Only
  /// LongRoPE reads it: rope_factors_long when it exceeds
  /// rope.scaling.original_context_length, else rope_factors_short (llama.cpp
  /// compares its own context size, which it rounds up to a multiple of 256).
  int n_ctx = 0;
};

/// A loaded model: hyper-parameters, architecture, tokenizer, compute engine
/// and weights. Immutable after load; the state of a run (KV cache, activation
/// buffers, counters, `forward`) lives in a Context (model/context.hpp), and
/// one Model can serve several Contexts used one at a time (the engine is
/// shared and not thread-safe).
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
  /// How the dtype was chosen: a requested dtype as itself ("q8_0"), auto with its reasons
  /// ("auto -> f32 (file F32, oneDNN ISA avx512_core_bf16, bf16)"); either followed by
  /// "; no Q8_0 matrix in the file: every matrix widened to F32" when kept blocks were widened.
  const std::string& dtype_note() const;
  /// SHA-256 (64 hex digits) of the file bytes this model was loaded from,
  /// computed at load from the same mapping the weights were copied from;
  /// "" when ModelOptions::hash was false.
  const std::string& sha256() const;
  /// KV-cache element type a new Context starts with (ModelOptions::kv_cache_dtype
  /// resolved against the compute dtype: F32, BF16 or F16, never Auto).
  KvCacheDtype kv_cache_dtype() const;
  /// Bytes a forward pass of `rows` x `seq` tokens (cache-free) allocates:
  /// the activation buffers ([T] x (n_embd, qkv, n_ff...) floats, T = the
  /// valid tokens packed, `tokens`, default rows * seq), the attention scores
  /// of one sequence ([group, seq, seq]), and the caller's logits array
  /// ([rows, seq, n_vocab] for all_logits, else [rows, n_vocab]; with
  /// `logit_rows` >= 0, [logit_rows, n_vocab] as Context::forward_rows
  /// materialises), and with bf16 tiles on kept blocks for more than 16 tokens
  /// the engine's widened panels (backend::widened_bf16_bytes of the largest
  /// matrix). For planning memory before a run.
  size_t activation_bytes_for(int rows, int seq, bool all_logits, int64_t tokens = -1, int64_t logit_rows = -1) const;
  /// Bytes K and V caches of `batch_size` rows x `max_seq_len` positions of
  /// element type `kv` take (Auto: kv_cache_dtype()), the sliding-window
  /// layers window-sized: KvCache::bytes_for.
  size_t cache_bytes_for(int batch_size, int max_seq_len, KvCacheDtype kv = KvCacheDtype::Auto) const;
  /// Backend counters: oneDNN primitives created so far (by every Context of this model).
  uint64_t primitives_created() const;
  /// Backend counters: engine buffer (re)allocations so far (scratchpad, padding, bf16 activations).
  uint64_t backend_allocations() const;

 private:
  friend class Context;  // runs the weights (model_impl.hpp)
  Model();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kveval
