#pragma once
// The storage types table: one row per ggml tensor type with every fact kveval
// uses about it (name, ggml type number, block geometry, codec, whether it is
// read, the backend dtype of its kept-block kernel). The GGUF reader's sizes
// and checks, the dequantizer, the GGUF writer, `make-model --type`, the load
// summary and the error messages read this table and nothing else.
// Facts: ggml's type_traits (ggml/src/ggml.c) and enum ggml_type (ggml.h);
// block layouts in ggml-common.h; gguf-py's GGML_QUANT_SIZES.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/quant/quant.hpp"

namespace kveval::gguf {

/// Tensor element types, numbered as ggml's `enum ggml_type` (ggml.h; gguf-py
/// GGMLQuantizationType). kveval reads the types whose TypeInfo::supported is
/// true; a file holding any other type is refused naming the tensor and type.
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
  TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

/// One row of the storage types table: a tensor of `block_size`-element blocks
/// stores each block in `type_size` bytes (ggml's type_traits blck_size and
/// type_size). Rows (dims[0]) must be a multiple of block_size.
struct TypeInfo {
  TensorType type;
  const char* name;     ///< ggml's name, e.g. "Q4_K"
  uint32_t block_size;  ///< elements per block (1 for F32/F16/BF16)
  uint32_t type_size;   ///< bytes per block
  /// Decodes blocks to f32 (bit-identical to gguf-py's numpy dequantizer); nullptr for a type kveval does not read.
  quant::DequantizeFn dequantize = nullptr;
  /// Encodes f32 into blocks (make-model, the tests); nullptr for a type kveval does not read.
  quant::QuantizeFn quantize = nullptr;
  /// The backend weight dtype whose kernel multiplies this type's blocks as they are, when one exists.
  std::optional<backend::Dtype> kept = std::nullopt;
  /// kveval reads and dequantizes it (exactly the rows with a codec).
  constexpr bool supported() const { return dequantize != nullptr && quantize != nullptr; }
};

namespace detail {
constexpr uint32_t kQK_K = 256;  // ggml-common.h QK_K
}  // namespace detail

/// The table. The types kveval reads come first, in the order the load line
/// and `make-model --type` list them (the table in docs/models.md); then the
/// others by ggml number. Sizes are ggml-common.h's block structs.
inline constexpr TypeInfo kTensorTypes[] = {
    {TensorType::F32, "F32", 1, 4, quant::dequantize_f32, quant::quantize_f32},
    {TensorType::F16, "F16", 1, 2, quant::dequantize_f16, quant::quantize_f16},
    {TensorType::BF16, "BF16", 1, 2, quant::dequantize_bf16, quant::quantize_bf16},
    {TensorType::Q8_0, "Q8_0", 32, 2 + 32, quant::dequantize_q8_0, quant::quantize_q8_0, backend::Dtype::Q8_0},
    {TensorType::Q4_0, "Q4_0", 32, 2 + 16, quant::dequantize_q4_0, quant::quantize_q4_0, backend::Dtype::Q4_0},
    {TensorType::Q4_1, "Q4_1", 32, 2 + 2 + 16, quant::dequantize_q4_1, quant::quantize_q4_1, backend::Dtype::Q4_1},
    {TensorType::Q5_0, "Q5_0", 32, 2 + 4 + 16, quant::dequantize_q5_0, quant::quantize_q5_0, backend::Dtype::Q5_0},
    {TensorType::Q5_1, "Q5_1", 32, 2 + 2 + 4 + 16, quant::dequantize_q5_1, quant::quantize_q5_1, backend::Dtype::Q5_1},
    {TensorType::Q2_K, "Q2_K", detail::kQK_K, 2 + 2 + detail::kQK_K / 16 + detail::kQK_K / 4, quant::dequantize_q2_k,
     quant::quantize_q2_k, backend::Dtype::Q2_K},
    {TensorType::Q3_K, "Q3_K", detail::kQK_K, 2 + detail::kQK_K / 4 + detail::kQK_K / 8 + 12, quant::dequantize_q3_k,
     quant::quantize_q3_k, backend::Dtype::Q3_K},
    {TensorType::Q4_K, "Q4_K", detail::kQK_K, 2 + 2 + detail::kQK_K / 2 + 12, quant::dequantize_q4_k,
     quant::quantize_q4_k, backend::Dtype::Q4_K},
    {TensorType::Q5_K, "Q5_K", detail::kQK_K, 2 + 2 + detail::kQK_K / 2 + detail::kQK_K / 8 + 12,
     quant::dequantize_q5_k, quant::quantize_q5_k, backend::Dtype::Q5_K},
    {TensorType::Q6_K, "Q6_K", detail::kQK_K, 2 + detail::kQK_K / 2 + detail::kQK_K / 4 + detail::kQK_K / 16,
     quant::dequantize_q6_k, quant::quantize_q6_k, backend::Dtype::Q6_K},
    // ggml types kveval does not read (named in the refusal).
    {TensorType::Q8_1, "Q8_1", 32, 2 + 2 + 32},  // sizeof(block_q8_1); gguf-py's GGML_QUANT_SIZES lists 40
    {TensorType::Q8_K, "Q8_K", detail::kQK_K, 4 + detail::kQK_K + detail::kQK_K / 8},
    {TensorType::IQ2_XXS, "IQ2_XXS", detail::kQK_K, 2 + detail::kQK_K / 4},
    {TensorType::IQ2_XS, "IQ2_XS", detail::kQK_K, 2 + detail::kQK_K / 4 + detail::kQK_K / 32},
    {TensorType::IQ3_XXS, "IQ3_XXS", detail::kQK_K, 2 + detail::kQK_K / 4 + detail::kQK_K / 8},
    {TensorType::IQ1_S, "IQ1_S", detail::kQK_K, 2 + detail::kQK_K / 8 + detail::kQK_K / 16},
    {TensorType::IQ4_NL, "IQ4_NL", 32, 2 + 16},
    {TensorType::IQ3_S, "IQ3_S", detail::kQK_K, 2 + detail::kQK_K / 4 + detail::kQK_K / 8 + detail::kQK_K / 32 + 4},
    {TensorType::IQ2_S, "IQ2_S", detail::kQK_K, 2 + detail::kQK_K / 4 + detail::kQK_K / 16},
    {TensorType::IQ4_XS, "IQ4_XS", detail::kQK_K, 2 + 2 + detail::kQK_K / 2 + detail::kQK_K / 64},
    {TensorType::I8, "I8", 1, 1},
    {TensorType::I16, "I16", 1, 2},
    {TensorType::I32, "I32", 1, 4},
    {TensorType::I64, "I64", 1, 8},
    {TensorType::F64, "F64", 1, 8},
    {TensorType::IQ1_M, "IQ1_M", detail::kQK_K, detail::kQK_K / 8 + detail::kQK_K / 16 + detail::kQK_K / 32},
    {TensorType::TQ1_0, "TQ1_0", detail::kQK_K, 2 + 4 * 13},
    {TensorType::TQ2_0, "TQ2_0", detail::kQK_K, 2 + 64},
    {TensorType::MXFP4, "MXFP4", 32, 1 + 16},
};

/// A ggml type number that ggml once used and removed, with its old name (for a clearer refusal).
struct RemovedType {
  uint32_t number;
  const char* name;
};
/// ggml's removed type numbers (ggml.h: "removed" comments).
inline constexpr RemovedType kRemovedTensorTypes[] = {
    {4, "Q4_2"},     {5, "Q4_3"},           {31, "Q4_0_4_4"},      {32, "Q4_0_4_8"},
    {33, "Q4_0_8_8"}, {36, "IQ4_NL_4_4"}, {37, "IQ4_NL_4_8"}, {38, "IQ4_NL_8_8"},
};

/// The table row of ggml type number `t`, or nullptr when ggml defines no such type
/// (numbers of removed types such as 4, 5 or 31-33 included).
constexpr const TypeInfo* type_info(uint32_t t) {
  for (const TypeInfo& i : kTensorTypes)
    if (static_cast<uint32_t>(i.type) == t) return &i;
  return nullptr;
}
/// The table row of a type of the enum; throws ArgumentError for a value outside the table.
const TypeInfo& type_info(TensorType t);
/// ggml's name of `t` ("Q4_K"), or "unknown".
constexpr const char* type_name(TensorType t) {
  const TypeInfo* i = type_info(static_cast<uint32_t>(t));
  return i ? i->name : "unknown";
}
/// The old name of removed ggml type number `t`, or nullptr.
constexpr const char* removed_type_name(uint32_t t) {
  for (const RemovedType& r : kRemovedTensorTypes)
    if (r.number == t) return r.name;
  return nullptr;
}
/// The supported types, in table order.
std::vector<TensorType> supported_types();
/// The supported types' names joined by ", " ("F32, F16, BF16, Q8_0, ..."), for error messages.
std::string supported_type_list();

// The backend's file-block geometry is the table's (backend/ cannot see this table).
static_assert([] {
  for (const TypeInfo& i : kTensorTypes)
    if (i.kept && backend::is_file_blocks(*i.kept) &&
        (i.type_size != backend::file_block_bytes(*i.kept) || i.block_size != backend::file_block_elements(*i.kept)))
      return false;
  return true;
}());
static_assert(type_info(8)->block_size == backend::kQBlock && type_info(2)->block_size == backend::kQBlock);

}  // namespace kveval::gguf
