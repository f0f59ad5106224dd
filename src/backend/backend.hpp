#pragma once
// The compute backend: the only module that includes oneDNN. Matmuls are
// oneDNN matmul primitives created once and reused (fixed M for decode steps,
// runtime M otherwise); weights are laid out once at load; a user scratchpad
// is shared. Long attention blocks are oneDNN batched matmuls; element-wise
// ops (RMSNorm, RoPE, SwiGLU, short attention) are OpenMP loops.
// Activations are float32, row-major, contiguous unless strides are given;
// weight matrices are float32, bfloat16 or quantized blocks (Dtype), with f32 accumulation.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace kveval::backend {

class Buffer;

/// Storage and compute type of weight matrices. F32: exact sgemm. BF16: weights
/// stored as bfloat16 (round to nearest even), activations converted to bf16
/// just before each matmul, f32 accumulation and f32 output (oneDNN bf16 matmul).
/// Q8_0: ggml's Q8_0 blocks (32 int8 quants and an f16 scale per block along
/// n_in; value = scale * quant) and Q4_0: ggml's Q4_0 blocks (32 4-bit quants,
/// two per byte, and an f16 scale; value = scale * (quant - 8)), multiplied in
/// f32 without widening the matrix (see matmul). Every quantized dtype is a
/// file-block dtype (is_file_blocks): the GGUF file's blocks kept byte for
/// byte, row by row: Q8_0 and Q4_0 (block_q8_0 34 bytes, block_q4_0 18), Q4_1,
/// Q5_0 and Q5_1 (blocks of 32: block_q4_1 20 bytes, block_q5_0 22, block_q5_1
/// 24; file_qblocks.hpp) and the K-quants (is_kquant; super-blocks of 256:
/// block_q2_K 84 bytes, 2.625 bits per weight; block_q3_K 110, 3.4375;
/// block_q4_K 144, 4.5; block_q5_K 176, 5.5; block_q6_K 210, 6.5625;
/// kquants.hpp). F16 (IEEE half) is a KV-cache
/// element type only (KvView), never a weight's.
enum class Dtype { F32, BF16, Q8_0, Q4_0, F16, Q4_K, Q6_K, Q5_K, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K };
/// Elements per block of Dtype::Q8_0 and Dtype::Q4_0 (ggml-common.h QK8_0 = QK4_0 = 32).
inline constexpr int64_t kQBlock = 32;
/// Elements per super-block of the K-quant dtypes (ggml-common.h QK_K).
inline constexpr int64_t kKBlock = 256;
/// True for the K-quant dtypes (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K): the file's super-blocks, row by row.
inline constexpr bool is_kquant(Dtype d) {
  return d == Dtype::Q2_K || d == Dtype::Q3_K || d == Dtype::Q4_K || d == Dtype::Q5_K || d == Dtype::Q6_K;
}
/// True for the dtypes kept as the file's blocks byte for byte, rows back to
/// back (Weight::ld bytes each): Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and the K-quants.
inline constexpr bool is_file_blocks(Dtype d) {
  return is_kquant(d) || d == Dtype::Q8_0 || d == Dtype::Q4_0 || d == Dtype::Q4_1 || d == Dtype::Q5_0 ||
         d == Dtype::Q5_1;
}
/// Elements per block of a file-block dtype: kKBlock for the K-quants, kQBlock (32) for the others.
inline constexpr int64_t file_block_elements(Dtype d) { return is_kquant(d) ? kKBlock : 32; }
/// Bytes of one block of a file-block dtype (ggml-common.h): Q8_0 34 ({f16 d; i8 qs[32]}), Q4_0 18
/// ({f16 d; u8 qs[16]}: element j < 16 the low nibble of qs[j], j + 16 its high nibble), Q4_1 20 ({f16 d, m; u8 qs[16]}), Q5_0 22
/// ({f16 d; u8 qh[4]; u8 qs[16]}), Q5_1 24 ({f16 d, m; u8 qh[4]; u8 qs[16]}), Q2_K 84 ({u8 scales[16];
/// u8 qs[64]; f16 d, dmin}), Q3_K 110 ({u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d}), Q4_K 144 ({f16 d,
/// dmin; u8 scales[12]; u8 qs[128]}), Q5_K 176 ({f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]}),
/// Q6_K 210 ({u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d}); 0 for another dtype.
inline constexpr int64_t file_block_bytes(Dtype d) {
  switch (d) {
    case Dtype::Q8_0: return 34;
    case Dtype::Q4_0: return 18;
    case Dtype::Q4_1: return 20;
    case Dtype::Q5_0: return 22;
    case Dtype::Q5_1: return 24;
    case Dtype::Q2_K: return 84;
    case Dtype::Q3_K: return 110;
    case Dtype::Q4_K: return 144;
    case Dtype::Q5_K: return 176;
    case Dtype::Q6_K: return 210;
    default: return 0;
  }
}
/// Bytes of `n_elements` (a multiple of file_block_elements) as file-block dtype `d`: the file's bytes.
inline constexpr uint64_t file_blocks_bytes(Dtype d, uint64_t n_elements) {
  return n_elements / static_cast<uint64_t>(file_block_elements(d)) * static_cast<uint64_t>(file_block_bytes(d));
}
/// Bytes of one K-quant super-block (file_block_bytes of a K-quant dtype).
inline constexpr int64_t kquant_block_bytes(Dtype d) { return file_block_bytes(d); }
/// Bytes of `n_elements` (a multiple of kKBlock) as K-quant dtype `d`: the
/// file's bytes (Q2_K 0.328125 per element, Q3_K 0.4296875, Q4_K 0.5625, Q5_K 0.6875, Q6_K 0.8203125).
inline constexpr uint64_t kquant_bytes(Dtype d, uint64_t n_elements) { return file_blocks_bytes(d, n_elements); }
/// "f32" / "bf16" / "q8_0" / "q4_0" / "f16" / "q4_1" / "q5_0" / "q5_1" / "q2_k" / "q3_k" / "q4_k" /
/// "q5_k" / "q6_k".
const char* to_string(Dtype d);

/// float -> bfloat16 bits, round to nearest even (NaN stays NaN). Source: the
/// bfloat16 format is the upper 16 bits of an IEEE-754 binary32.
uint16_t f32_to_bf16(float f);
/// bfloat16 bits -> float (exact).
float bf16_to_f32(uint16_t h);
/// y[i] = f32_to_bf16(x[i]) for i < n.
void to_bf16(const float* x, uint16_t* y, size_t n);

/// Name of the ISA oneDNN dispatches to on this CPU (dnnl::get_effective_cpu_isa),
/// e.g. "avx512_core_bf16", "avx512_core_amx", "avx2".
const char* cpu_isa_name();
/// True when oneDNN's effective ISA has native bf16 dot products
/// (>= avx512_core_bf16: AVX512-BF16 or AMX).
bool cpu_has_bf16();
/// True when oneDNN can create a bf16 x bf16 -> f32 matmul on this CPU: native
/// on avx512_core_bf16/amx, emulated on avx512_core; false on AVX2 and older
/// (oneDNN 2.6 has no bf16 matmul there). Probed once.
bool bf16_matmul_available();

/// Allocates `n` floats, not zeroed, 64-byte aligned; from 2 MiB up the block
/// is a 2 MiB aligned mapping of its own, with transparent huge pages advised
/// for its whole 2 MiB pages (fewer page faults at load, fewer TLB misses when
/// streaming weights) and its tail on 4 KiB pages, so no more than the block
/// becomes resident. Free with free_floats (nullptr: nothing). Throws std::bad_alloc.
float* alloc_floats(size_t n);
void free_floats(float* p);

/// Float memory whose pages become resident only when first written: an
/// anonymous mapping (zero pages on first touch) advised MADV_NOHUGEPAGE, so
/// that even with transparent huge pages set to `always` a write does not make
/// the surrounding 2 MiB resident. For the KV cache, where only the positions
/// generated so far are written. Move-only; unmapped on destruction or reset().
class PageBuffer {
 public:
  PageBuffer() = default;
  /// Maps `n` floats (page-aligned). Throws std::bad_alloc when mmap fails.
  static PageBuffer allocate(size_t n);
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept;
  PageBuffer& operator=(PageBuffer&& o) noexcept;
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  float* get() const { return p_; }
  size_t bytes() const { return bytes_; }
  explicit operator bool() const { return p_ != nullptr; }
  void reset();

 private:
  float* p_ = nullptr;
  size_t bytes_ = 0;
};

/// How matmul multiplies decode steps (up to kInt8MaxRows = 16 rows, not
/// batch-invariant) on kept Q8_0, Q4_0, Q4_K, Q5_K and Q6_K blocks. Exact: each weight
/// decoded to f32 and multiplied in f32 (qblocks.hpp, kquants.hpp). Int8:
/// llama.cpp's vec_dot scheme, each activation row quantized per block (Q8_K
/// for K-quants, Q8_0 for Q8_0) and multiplied in int32 with the blocks'
/// quants (int8_dot.hpp); not exact. Scoring, prefill and every other dtype
/// stay as in Exact.
enum class MatmulMode { Exact, Int8 };
/// "exact" / "int8".
const char* to_string(MatmulMode m);
/// True for the weight dtypes MatmulMode::Int8 multiplies with int8 activations: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
inline constexpr bool int8_matmul_dtype(Dtype d) {
  return d == Dtype::Q8_0 || d == Dtype::Q4_0 || d == Dtype::Q4_K || d == Dtype::Q5_K || d == Dtype::Q6_K;
}

/// Engine, stream and thread pool. One per model. Not thread-safe.
class Engine {
 public:
  /// `threads` compute threads (0 = hardware concurrency). Throws BackendError.
  explicit Engine(int threads);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  int threads() const;
  /// oneDNN primitives created so far (a warm engine creates none).
  uint64_t primitives_created() const;
  /// Engine-owned buffer (re)allocations so far: scratchpad, row padding,
  /// bf16 activations (a warm engine allocates none).
  uint64_t buffer_allocations() const;
  /// Kept-block weights (Q8_0, Q4_0, K-quants) in products of many rows: with `bf16`, widened a
  /// chunk at a time to bf16 panels and multiplied in oneDNN's bf16 brgemm where the CPU has bf16
  /// dot products (kernel_has_bf16_dot; elsewhere f32 as without it), giving the bits of a BF16
  /// weight rounded from the same values; without it (the default), widened to f32: exact to f32
  /// rounding. Decode steps of few rows always run the block kernels in f32.
  void set_block_tiles_bf16(bool bf16);
  bool block_tiles_bf16() const;
  /// How decode steps on kept blocks multiply (MatmulMode; Exact at construction).
  void set_matmul_mode(MatmulMode m);
  MatmulMode matmul_mode() const;
  struct Impl;
  Impl& impl();

 private:
  std::unique_ptr<Impl> impl_;
};

/// A weight matrix W [n_out, n_in] (PyTorch Linear / GGUF {n_in, n_out}) in
/// f32 or bf16 (Dtype), laid out once at load as Wᵀ [n_in, n_out] row-major (oneDNN "ab" weights),
/// which oneDNN 2.6 multiplies faster than W read as "ba" (docs/design/matmul-paths.md).
/// 64-byte (2 MiB for large) aligned memory.
class Weight {
 public:
  Weight() = default;
  /// Copies `data` ([n_out, n_in] row-major), transposing it (and rounding to
  /// bf16 for Dtype::BF16). Throws ArgumentError on size mismatch.
  Weight(std::span<const float> data, int64_t n_out, int64_t n_in, Dtype dtype = Dtype::F32);
  /// Uninitialised matrix, to be filled with set_rows() (set_rows_file_blocks() for the file-block
  /// dtypes, which need n_in % file_block_elements == 0).
  /// Throws ArgumentError.
  Weight(int64_t n_out, int64_t n_in, Dtype dtype = Dtype::F32);
  /// Writes rows [row0, row0 + rows) of W from `src` ([rows, n_in] row-major,
  /// i.e. the GGUF/PyTorch layout); used to stack Q/K/V or gate/up in one matrix.
  /// Throws ArgumentError if the rows fall outside [0, n_out).
  void set_rows(int64_t row0, const float* src, int64_t rows);
  /// As set_rows, from bf16 bits (already rounded, e.g. by the loader); a
  /// Dtype::F32 matrix widens them exactly. Throws ArgumentError as set_rows.
  void set_rows_bf16(int64_t row0, const uint16_t* src, int64_t rows);
  /// As set_rows, for the file-block dtypes (is_file_blocks: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, K-quants) only: `blocks` holds
  /// rows [rows, n_in / file_block_elements] blocks in the GGUF tensor's byte layout (ggml-common.h block_q8_0
  /// ... block_q6_K, any alignment), copied as they are. Throws ArgumentError on another dtype or rows outside [0, n_out).
  void set_rows_file_blocks(int64_t row0, const void* blocks, int64_t rows);
  /// A file-block weight [n_out, n_in] reading its rows in place at `rows` (a GGUF tensor's bytes in a mapped file,
  /// any alignment), holding `owner` (the mapping) so they outlive the file object; set_rows_file_blocks refused.
  /// Throws ArgumentError as the constructor, or for another dtype.
  static Weight view_file_blocks(int64_t n_out, int64_t n_in, Dtype dtype, const void* rows, std::shared_ptr<const void> owner);
  bool is_view() const { return view_ != nullptr; }  ///< raw() in memory not owned (view_file_blocks)
  int64_t n_out() const { return n_out_; }
  int64_t n_in() const { return n_in_; }
  Dtype dtype() const { return dtype_; }
  /// Wᵀ (Dtype::F32 only): element (k, n) at data()[k * ld() + n].
  const float* data() const { return data_.get(); }
  /// Wᵀ as bf16 bits (Dtype::BF16 only): element (k, n) at bf16()[bf16_index(k, n)].
  const uint16_t* bf16() const { return reinterpret_cast<const uint16_t*>(data_.get()); }
  /// Dtype::BF16: whether Wᵀ [n_in, n_out] is kept in oneDNN's BA16a64b2a
  /// layout (panels of 64 columns; in each, the rows in pairs (k, k + 1), each
  /// column's pair adjacent: [n_out / 64][n_in / 2][64][2], n_out padded to 64
  /// and n_in to 32 with zeros; oneDNN's tag blocks n_in by 16 pairs, which
  /// gives the same offsets). Chosen where kveval's bf16 decode kernel runs
  /// (kernel_has_bf16_dot: AVX512-BF16 with oneDNN at avx512_core_bf16 or
  /// above), since oneDNN's brgemm reads it without packing and the decode
  /// kernel as one stream; otherwise row-major Wᵀ with row stride ld().
  bool bf16_panels() const { return panels_; }
  /// Dtype::BF16: index of element (k, n) of Wᵀ in bf16().
  int64_t bf16_index(int64_t k, int64_t n) const {
    return panels_ ? (n / 64) * ld_ + (k / 2) * 128 + (n % 64) * 2 + (k & 1) : k * ld_ + n;
  }
  /// Storage of Wᵀ (F32, BF16) or of the file-block dtypes' blocks (see ld()).
  const void* raw() const { return view_ ? view_ : data_.get(); }
  /// BF16 in panels (bf16_panels): elements per 64-column panel, n_in rounded
  /// up to 32, times 64. Otherwise:
  /// Row stride of Wᵀ in elements: n_out, plus 64 bytes when a row's bytes are a
  /// multiple of 4 KiB (a power-of-two stride maps every row to the same cache
  /// sets and slows a decode step several times: docs/design/matmul-paths.md).
  /// File-block dtypes: bytes of one row's blocks (n_in / file_block_elements * file_block_bytes);
  /// row n's blocks are the file's bytes at raw() + n * ld(), rows back to back.
  int64_t ld() const { return ld_; }
  /// Bytes of the matrix elements (4 or 2 per element; file-block dtypes:
  /// file_blocks_bytes, the file's tensor bytes), without the zero padding of BF16 panels or padded rows.
  size_t bytes() const {
    const auto n = static_cast<size_t>(n_out_ * n_in_);
    return is_file_blocks(dtype_) ? file_blocks_bytes(dtype_, n) : n * (dtype_ == Dtype::BF16 ? 2 : 4);
  }

 private:
  struct Free { void operator()(float* p) const; };
  std::unique_ptr<float, Free> data_;
  int64_t n_out_ = 0, n_in_ = 0, ld_ = 0;
  Dtype dtype_ = Dtype::F32;
  bool panels_ = false;  // BF16 in oneDNN's BA16a64b2a layout (bf16_panels)
  const void* view_ = nullptr;  // view_file_blocks: the rows, kept mapped by owner_
  std::shared_ptr<const void> owner_;
};

/// Embedding lookup on a kept-block weight (a file-block dtype: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 or a
/// K-quant, e.g. token_embd as the file holds it): dst[i, k] = element (ids[i], k) of W, dst [ids.size(), n_in]
/// f32, only the looked-up rows decoded, to the values the widened path multiplies (as gguf-py's numpy
/// dequantizers round them; Q8_0/Q4_0 d * q exactly), on the calling thread. Throws ArgumentError for another dtype or an id outside [0, n_out).
void gather_rows(const Weight& w, std::span<const int32_t> ids, float* dst);

/// y[M, n_out] = x[M, n_in] · Wᵀ (+ y if accumulate), x and y float32; a BF16
/// weight converts x to bf16 first (into an engine buffer, grown at warm-up
/// only) and multiplies bf16 x bf16 -> f32. oneDNN matmul primitives are created
/// once and cached. Which path a product takes:
/// - Decode steps (not batch-invariant) of one F32 row, or of up to 8 with F32
///   on AVX-512, or of BF16 with AVX512-BF16 (up to 8 rows; one on AMX):
///   kveval's gemv_rows (gemv.hpp: the weight read front to back; each row's
///   bits independent of M).
/// - BF16 weights in panels (Weight::bf16_panels) otherwise: oneDNN's brgemm on
///   the panels, one fixed-M primitive per block of 512, 256, 128, 64, 32, 16
///   or fewer rows (matmul.cpp); each row's bits are independent of M and of
///   the thread count, so this is the batch-invariant path too.
/// - Other F32 and row-major BF16 products (BF16 is row-major only without
///   AVX512-BF16): for 2 <= M <= 16 (decode steps) with F32 weights (9 <= M <=
///   16 on AVX-512), one fixed-M primitive per (M,
///   n_in, n_out, accumulate) (brgemm); otherwise one per (n_in, n_out,
///   accumulate) with runtime M (jit sgemm; its M = 1 kernel is a gemv).
/// - With `batch_invariant` (F32, BF16 row-major), each row's result is
///   bit-identical whatever M is: oneDNN's sgemm uses another kernel (another
///   summation order) below 16 rows, so fewer rows are padded to 16 (oneDNN
///   2.6: rows agree bit for bit for every M >= 16 on AVX-512; on AVX2 rows go
///   in blocks of 192/96/48/24/16, see matmul.cpp).
/// - Block or file-block weights (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, K-quants): products that are not batch-invariant of up to 20
///   rows (1 thread) or 32 rows (2+ threads: decode steps, short prompts
///   prefilled during dynamic batching) in kveval's block kernel; longer or
///   batch-invariant ones through sgemm on rows widened to f32 a chunk at a
///   time (engine buffer). With MatmulMode::Int8 (Engine::set_matmul_mode),
///   such products of up to 16 rows on Q8_0, Q4_0, Q4_K, Q5_K or Q6_K blocks run
///   int8_matmul instead (int8 activations).
/// Products under 2^20 multiply-adds (2^16 for decode steps) run on one
/// thread. Throws BackendError.
void matmul(Engine& eng, const float* x, int64_t m, const Weight& w, float* y, bool accumulate = false,
            bool batch_invariant = false);

/// Bytes of the engine buffer a bf16 product widens kept blocks [n_out, n_in] into (panels, at most 64 MiB, + f32 tiles).
size_t widened_bf16_bytes(int64_t n_out, int64_t n_in, int threads);

/// Rows up to which matmul's products that are not batch-invariant (decode
/// steps) give each row of a `wdt` weight the bits it gets alone: kGemvMaxRows
/// (8) for F32 on AVX-512 and BF16 with AVX512-BF16 without AMX (kveval's
/// kernels), else 0: oneDNN sums in another order for other row counts, and
/// the Q8_0/Q4_0 block kernel, row-invariant up to 20 rows (1 thread) or 32,
/// shares its batch-invariant path (widened rows) with no bits, so it is not claimed. Model::forward
/// uses it to keep a cached pass's prompts apart, on the batch-invariant path.
int64_t decode_invariant_rows(Dtype wdt);

/// True when kveval's bf16 decode kernel (gemv_rows) and oneDNN's bf16 product
/// on the same panels give every output the same bits: both sum chains of
/// bf16_chunk(n_in) rows of Wᵀ (gemv.hpp), which is how oneDNN 2.6's brgemm
/// blocks K on AVX512-BF16 (measured, not documented; AMX tiles sum in another
/// order). Checked once per process on two small products against oneDNN
/// itself; false without panels, on AMX (whose brgemm sums in another order
/// for some row counts) or when they differ.
bool bf16_paths_agree();

/// True when every matmul on a `wdt` weight gives each row the bits it gets
/// alone, whatever M, the thread count and batch_invariant are: BF16 where
/// bf16_paths_agree() (decode steps of any size, prompts and scoring alike).
/// The run-time check covers two shapes, 3 rows and 1 thread; the rest rests
/// on oneDNN's rows being M- and thread-invariant (tests/backend: invariance,
/// gemv) and on model.dynamic_batching. Model::forward then runs a pass's
/// decode steps and prompts as one product.
bool matmul_rows_invariant(Dtype wdt);

/// Rows below which oneDNN's sgemm switches kernel (see matmul's batch_invariant).
inline constexpr int64_t kInvariantMinRows = 16;

/// y[rows, dim] = x / sqrt(mean(x²) + eps) * weight[dim]  (RMSNorm, Zhang & Sennrich 2019). y may alias x.
void rmsnorm(const float* x, const float* weight, float* y, int64_t rows, int64_t dim, float eps);

/// Rotary embedding parameters (Su et al. 2021, as llama.cpp's ggml_rope_ext
/// without YaRN): pair i of a head (i < n_rot/2) is rotated by
/// theta_i = pos * freq_base^(-2i/n_rot) * freq_scale / freq_factors[i], with
/// cos and sin times attn_factor.
struct RopeParams {
  int64_t n_rot = 0;       ///< rotated dimensions of each head (even, <= head_dim); the rest pass through
  float freq_base = 10000.0f;  ///< GGUF {arch}.rope.freq_base
  /// Linear position interpolation: 1 / {arch}.rope.scaling.factor (llama.cpp rope_freq_scale).
  float freq_scale = 1.0f;
  /// [n_rot/2] divisors of each pair's frequency (GGUF rope_freqs.weight,
  /// Llama 3.1 "llama3" scaling), or nullptr for none.
  const float* freq_factors = nullptr;
  /// false: llama.cpp NORM layout, pairs (x[2i], x[2i+1]); true: NEOX
  /// layout, pairs (x[i], x[i + n_rot/2]).
  bool neox = false;
  /// cos and sin times it: the rotated dimensions scaled (ggml_rope_ext's attn_factor,
  /// Phi-3 LongRoPE's {arch}.rope.scaling.attn_factor); 1 = none.
  float attn_factor = 1.0f;
};

/// In-place rotary embedding of x [n_tokens, n_heads, head_dim] with
/// `token_stride` floats between tokens (0 = n_heads * head_dim); pos[t] is
/// token t's position. cos/sin are computed in double per token.
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, const int32_t* pos, const RopeParams& p,
          int64_t token_stride = 0);

/// The cos/sin of `rope`'s angles for a block of tokens, [n_tokens, n_rot/2]
/// each: computed once per forward pass and shared by every layer's calls.
struct RopeTable {
  std::vector<float> cs, sn;
  int64_t n_tokens = 0, half = 0;
  bool neox = false;
};

/// Fills `t` for positions pos[0, n_tokens) with rope's arithmetic (double
/// precision angles); the vectors only grow (no allocation once warm).
/// Throws ArgumentError for an odd or out-of-range n_rot.
void rope_table(const int32_t* pos, int64_t n_tokens, const RopeParams& p, RopeTable& t);

/// rope with the angles of `t`: bit-identical to rope(x, t.n_tokens, n_heads,
/// head_dim, pos, p, token_stride) for the table's pos and p. Throws
/// ArgumentError if n_rot > head_dim.
void rope(float* x, int64_t n_heads, int64_t head_dim, const RopeTable& t, int64_t token_stride = 0);

/// The NORM layout without scaling: rope(x, ..., RopeParams{n_rot, freq_base}, token_stride).
void rope(float* x, int64_t n_tokens, int64_t n_heads, int64_t head_dim, int64_t n_rot,
          const int32_t* pos, float freq_base, int64_t token_stride = 0);

/// y[r, i] += bias[i] for rows r < rows, i < n; rows are `row_stride` floats
/// apart (0 = n). Used for the optional projection biases (Qwen2's Q/K/V).
void add_bias(float* y, const float* bias, int64_t rows, int64_t n, int64_t row_stride = 0);

/// In-place RMSNorm of every head: x [n_tokens, n_heads, head_dim] with
/// `token_stride` floats between tokens; each head vector h is replaced by
/// h / sqrt(mean(h²) + eps) * weight[head_dim] (Qwen3's q_norm/k_norm).
void rmsnorm_heads(float* x, const float* weight, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                   int64_t token_stride, float eps);

/// out[rows, n] = silu(gate_up[:, :n]) * gate_up[:, n:]: SwiGLU (Shazeer 2020)
/// on the output of the fused [gate; up] matmul, gate_up is [rows, 2n].
void swiglu_fused(const float* gate_up, float* out, int64_t rows, int64_t n);

/// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x³))): the tanh
/// approximation of GELU (Hendrycks & Gimpel 2016; ggml's GELU, Gemma's
/// "gelu_pytorch_tanh").
inline float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

/// out[rows, n] = gelu_tanh(gate_up[:, :n]) * gate_up[:, n:]: GeGLU (Shazeer
/// 2020; Gemma's MLP) on the fused [gate; up] matmul's output [rows, 2n].
void geglu_fused(const float* gate_up, float* out, int64_t rows, int64_t n);

/// s = x · scale, then, when softcap c > 0, c · tanh(s / c): the soft-cap of
/// Gemma 2 (attention scores, final logits); with c = 0 exactly x · scale.
inline float scale_softcap(float x, float scale, float softcap) {
  const float s = x * scale;
  return softcap > 0.0f ? softcap * std::tanh(s / softcap) : s;
}

/// x[i] = scale_softcap(x[i], scale, softcap) for i < n (final logits: Granite's
/// 1 / logit_scale, Gemma 2's final_logit_softcapping).
void scale_softcap(float* x, int64_t n, float scale, float softcap);

/// x[i] *= scale for i < n (the embedding scale, e.g. Gemma's sqrt(n_embd)).
void scale(float* x, int64_t n, float scale);

/// y[i] += scale · x[i] for i < n (a residual branch scaled, Granite's residual_scale).
void add_scaled(float* y, const float* x, int64_t n, float scale);

/// Keys/values of one sequence for attention: element (position p, kv head h, d)
/// is at base[p * pos_stride + h * head_stride + d] (strides in elements).
/// `dtype` is the elements' type: F32 (float), BF16 (uint16_t bfloat16 bits)
/// or F16 (uint16_t IEEE half bits); BF16 and F16 are widened exactly to float
/// as they are read, so attention over them is bit-identical to attention over
/// their F32 widening. Other dtypes throw ArgumentError.
/// `begin`: the first position the view holds (a sliding-window cache drops
/// older ones): k and v point at position `begin`, position p's element is at
/// base[(p - begin) * pos_stride + ...], and no query of the call may see a
/// position before it (ArgumentError). The batched-matmul path runs over
/// positions [0, past + n_q) as for begin 0, the absent ones as zero rows
/// (scores masked to 0, so the bits equal those of a view holding them).
struct KvView {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t pos_stride = 0;
  int64_t head_stride = 0;
  Dtype dtype = Dtype::F32;
  int64_t begin = 0;
};

/// A token tree (a trie of token sequences) over a query block without a
/// cached prefix (prefix packing): block indices [0, trunk) are a causal trunk
/// at positions [0, trunk); every later block index t has a parent
/// parent[t - trunk] < t (-1: a root, at position 0) and sits at position
/// pos[t - trunk] = the parent's position + 1. A query sees its ancestors and
/// itself, never another node. Its keys are handed to the kernels in position
/// order, so its output has the bits of the same tokens attended as one causal
/// sequence by the loop path.
struct TreeMask {
  int64_t trunk = 0;
  std::span<const int64_t> parent;  ///< [n_q - trunk]: each later query's parent block index (< its own, or -1)
  std::span<const int64_t> pos;     ///< [n_q - trunk]: their positions
  /// Position of block index t.
  int64_t position(int64_t t) const { return t < trunk ? t : pos[static_cast<size_t>(t - trunk)]; }
  /// Block index of t's parent (-1 for a root).
  int64_t parent_of(int64_t t) const { return t < trunk ? t - 1 : parent[static_cast<size_t>(t - trunk)]; }
};

/// How attention turns a query-key dot product into a softmax input, and which
/// positions a query sees; 0 in a field leaves it at its default.
/// score(q, k) = scale_softcap(q · k, scale, softcap); query at position i sees
/// positions [max(0, i + 1 - window), i] (causal; every earlier one when window is 0).
struct AttentionOptions {
  float scale = 0.0f;    ///< multiplier of q · k; 0 = 1 / sqrt(head_dim)
  float softcap = 0.0f;  ///< > 0: score = softcap · tanh(score / softcap) (Gemma 2's attn_logit_softcapping)
  /// > 0: sliding window, positions a query sees with itself included
  /// (llama.cpp is_masked_swa: position p is masked for query i when i - p >= window).
  int64_t window = 0;
  /// Non-null: the query block is a token tree (TreeMask); windows apply to
  /// its positions. Honoured by the loop paths (one sequence per call, past =
  /// the block index of its first query); the oneDNN `attention` runs the trunk
  /// as a causal block and routes the other nodes to the loop path.
  const TreeMask* tree = nullptr;
  /// The scale for heads of `head_dim`: `scale`, or 1 / sqrt(head_dim) when it is 0.
  float scale_for(int64_t head_dim) const {
    return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
  }
  /// First position a query at `pos` sees.
  int64_t first_visible(int64_t pos) const { return window > 0 && pos + 1 > window ? pos + 1 - window : 0; }
};

/// Causal grouped-query attention for one sequence.
/// q: [n_q, n_head, head_dim] with `q_stride` floats between queries (0 =
/// n_head * head_dim); query i sits at position past + i;
/// kv: positions [0, past + n_q) of n_head_kv heads (query head h uses kv head
/// h / (n_head / n_head_kv)); out: [n_q, n_head, head_dim].
/// Scores and visible positions as `opts` says (default: scale 1/sqrt(head_dim),
/// no soft-cap, every earlier position); softmax in float with max subtraction.
void attention(const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past, int64_t n_head,
               int64_t n_head_kv, int64_t head_dim, int64_t q_stride = 0, const AttentionOptions& opts = {});

/// One sequence's query block for the multi-sequence `attention` below:
/// q [n_q, n_head, head_dim] (rows `q_stride` apart), query i at position
/// past + i, keys/values `kv` for positions [0, past + n_q), out [n_q, n_head, head_dim].
struct AttentionSeq {
  const float* q = nullptr;
  KvView kv;
  float* out = nullptr;
  int64_t n_q = 0;
  int64_t past = 0;
};

/// The loop `attention` above for several sequences in one parallel loop over
/// (sequence, query, chunk of kv heads) items: with AVX-512 and head_dim 16-128
/// in steps of 16, kv head by kv head in blocks of 16 (scores) and 32 (V)
/// positions, K and V read once for the heads sharing them; otherwise each
/// item reads its positions front to back (at each position the K, then V,
/// rows of its heads). Chunks are cut
/// so that every thread has an item. Each head runs the same arithmetic in the
/// same order whatever the chunking, so every output is bit-identical to one
/// `attention` call per sequence and the same for any thread count, with one
/// fork/join instead of one per sequence. All sequences share n_head, n_head_kv, head_dim, q_stride (0 =
/// n_head * head_dim) and `opts`.
void attention(std::span<const AttentionSeq> seqs, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
               int64_t q_stride = 0, const AttentionOptions& opts = {});

/// Same result as `attention` above, for long query blocks computed with two
/// oneDNN batched matmuls per kv head (S = Q·Kᵀ over the `n_head/n_head_kv`
/// query heads sharing it, masked softmax, O = S·V); primitives use runtime
/// dims and strides, created once. Blocks for which attention_uses_loop holds
/// (short blocks such as decode steps, narrow heads, up to 64 queries without a
/// cached prefix on AVX-512) use the loop version. `scratch` holds the scores
/// [group, n_q, past + n_q] and, for a BF16 `kv`, one kv head's K and V
/// widened to f32 ([past + n_q, head_dim] each). Throws ArgumentError for a
/// `kv.dtype` other than F32 or BF16.
void attention(Engine& eng, const float* q, const KvView& kv, float* out, int64_t n_q, int64_t past,
               int64_t n_head, int64_t n_head_kv, int64_t head_dim, int64_t q_stride, Buffer& scratch,
               const AttentionOptions& opts = {});

/// True when the oneDNN `attention` above runs the loop version for this block of n_q queries after
/// `past` cached positions, so the caller may batch it with other sequences: n_q < 16 or head_dim < 32,
/// and blocks of up to 64 queries without a cached prefix where the AVX-512 head kernel runs (head_dim
/// 32-128 in steps of 16).
bool attention_uses_loop(int64_t n_q, int64_t past, int64_t head_dim);

/// Queries per block of the oneDNN `attention`: a longer block runs as blocks
/// of this many queries (query c0 of the block at past + c0), so calls on
/// consecutive blocks of this size give the bits of one call on all of them.
inline constexpr int64_t kAttentionQueryBlock = 128;

/// Float buffer aligned to 64 bytes, grow-only (no shrink, no zero-fill).
class Buffer {
 public:
  /// Ensures capacity >= n floats; returns true if it had to allocate.
  bool reserve(size_t n);
  float* data() { return p_.get(); }
  const float* data() const { return p_.get(); }
  size_t capacity() const { return cap_; }
  void release() { p_.reset(); cap_ = 0; }

 private:
  struct Free { void operator()(float* p) const; };
  std::unique_ptr<float, Free> p_;
  size_t cap_ = 0;
};

}  // namespace kveval::backend
