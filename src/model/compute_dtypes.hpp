#pragma once
// The compute dtypes table: one row per `--dtype` value with everything the
// option parsers, the CLI help, the memory estimate and the loader's keep
// decision need to know about it. The GGUF storage types are a separate table
// (tensor_types.hpp); a row here names the storage type it keeps as blocks,
// and that type's row names the backend kernel.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/dequantize.hpp"
#include "model/kv_cache.hpp"
#include "model/tensor_types.hpp"

namespace kveval {

/// Compute dtype of weights and matmuls. F32: exact. BF16: weights stored in
/// bfloat16, matmuls in oneDNN bf16 kernels with f32 accumulation and output
/// (norms, softmax, RoPE, residuals, log-softmax stay f32). Q8_0: the file's
/// Q8_0 matrices stay as the file's blocks (1.0625 bytes per weight held) and are multiplied in
/// f32 (decode: backend's Q8_0 kernel; longer products: f32 sgemm on widened
/// chunks), other matrices load as F32; exact to f32 rounding against the
/// file's dequantized values. Q4_0: the same for the file's Q4_0 matrices
/// (ggml-common.h block_q4_0: 0.5625 bytes per weight held, 4-bit quants and an
/// f16 scale per 32). Blocks: every matrix whose GGUF type has a kept-block
/// kernel (every quantized type kveval reads: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
/// Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) stays in its own blocks, so a mixed file
/// (Q4_K_M: Q4_K and Q6_K) stays resident at about its file size; the others
/// (F32, F16, BF16) load as F32. BlocksBf16: as Blocks, with products of many rows (scoring,
/// prefill) on bf16 tiles widened from the blocks where the CPU has bf16 dot
/// products (backend::Engine::set_block_tiles_bf16): the speed and the scoring
/// bits of bf16 weights, the memory of the file; decode steps stay exact.
/// Auto: see resolve_dtype. The facts of each are its row of kComputeDtypes.
enum class ComputeDtype { F32, BF16, Auto, Q8_0, Q4_0, Blocks, BlocksBf16 };

/// One row of the compute dtypes table.
struct ComputeDtypeInfo {
  ComputeDtype dtype;
  const char* name;  ///< as typed after --dtype and in a spec's "dtype" ("q8_0")
  /// Element type the matrices that are not kept are converted to at load (dequantize_rows' target);
  /// its dtype_size is their bytes per weight in the memory estimate.
  DType matrices;
  /// The GGUF storage type whose matrices stay resident as blocks (token_embd aside), multiplied by that
  /// type's kept-block kernel (TypeInfo::kept); none for f32, bf16, auto and blocks.
  std::optional<gguf::TensorType> kept;
  /// Keeps every matrix whose storage type has a kept-block kernel, each in its own type's blocks.
  bool keeps_kernel_types;
  /// `auto` may resolve to it (resolve_dtype).
  bool auto_candidate;
  /// Kept blocks multiplied on bf16 tiles in products of many rows (Engine::set_block_tiles_bf16).
  bool bf16_tiles;
  /// The KV-cache element type `--kv-cache-dtype auto` resolves to with it (vLLM's auto: the model's dtype).
  KvCacheDtype kv_cache;
};

/// The table, in the order the CLI help and the parse error list the names.
inline constexpr ComputeDtypeInfo kComputeDtypes[] = {
    {ComputeDtype::F32, "f32", DType::F32, std::nullopt, false, true, false, KvCacheDtype::F32},
    {ComputeDtype::BF16, "bf16", DType::BF16, std::nullopt, false, true, false, KvCacheDtype::BF16},
    {ComputeDtype::Q8_0, "q8_0", DType::F32, gguf::TensorType::Q8_0, false, true, false, KvCacheDtype::F32},
    {ComputeDtype::Q4_0, "q4_0", DType::F32, gguf::TensorType::Q4_0, false, false, false, KvCacheDtype::F32},
    {ComputeDtype::Blocks, "blocks", DType::F32, std::nullopt, true, true, false, KvCacheDtype::F32},
    {ComputeDtype::BlocksBf16, "blocks-bf16", DType::F32, std::nullopt, true, true, true, KvCacheDtype::F32},
    {ComputeDtype::Auto, "auto", DType::F32, std::nullopt, false, false, false, KvCacheDtype::F32},
};

/// The row of `d` (every enum value has one).
constexpr const ComputeDtypeInfo& compute_dtype_info(ComputeDtype d) {
  for (const ComputeDtypeInfo& i : kComputeDtypes)
    if (i.dtype == d) return i;
  return kComputeDtypes[0];  // unreachable for a value of the enum
}

/// Whether compute dtype `d` keeps a matrix of GGUF type `t` in its blocks: `t` has a kept-block
/// kernel and the row keeps `t` (kept) or every such type (keeps_kernel_types).
constexpr bool keeps(ComputeDtype d, gguf::TensorType t) {
  const ComputeDtypeInfo& row = compute_dtype_info(d);
  const gguf::TypeInfo* ti = gguf::type_info(static_cast<uint32_t>(t));
  return ti != nullptr && ti->kept.has_value() && (row.keeps_kernel_types || row.kept == t);
}

/// Bytes `n_elements` of a matrix of GGUF type `t` take in memory under compute dtype `d`: its kept
/// blocks when `kept` and keeps(d, t) (backend::blocks_bytes or file_blocks_bytes of the kernel's dtype),
/// else dtype_size(row.matrices) each.
uint64_t matrix_bytes(ComputeDtype d, gguf::TensorType t, bool kept, uint64_t n_elements);

/// The names of kComputeDtypes in table order ("f32", "bf16", "q8_0", "q4_0", "auto"); with `reduced`
/// only the rows other than f32 and auto (the dtypes `bench --tests fidelity` compares with f32).
std::vector<std::string> compute_dtype_name_list(bool reduced = false);
/// The names of the KV-cache element types in the order help texts list them ("f32", "bf16", "f16", "auto").
std::vector<std::string> kv_cache_dtype_name_list();
/// `names` joined for a help text or an error: "a, b, c" with `last` (default " or ") before the last
/// one; each between two `quote`s ("'" gives "'a', 'b' or 'c'").
std::string join_names(const std::vector<std::string>& names, const std::string& last = " or ",
                       const std::string& quote = "");

// Every kept storage type has a kept-block kernel.
static_assert([] {
  for (const ComputeDtypeInfo& i : kComputeDtypes)
    if ((i.kept && !gguf::type_info(static_cast<uint32_t>(*i.kept))->kept) || (i.kept && i.keeps_kernel_types))
      return false;
  return true;
}());

}  // namespace kveval
