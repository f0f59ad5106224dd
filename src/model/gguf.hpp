#pragma once
// GGUF reader (versions 2 and 3): memory-maps a file, parses and validates the
// header, metadata and tensor infos before anything is used.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace kveval::gguf {

/// Metadata value types, numbered as in the GGUF spec.
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

/// Tensor element types kveval reads (ggml numbering). Others are refused.
enum class TensorType : uint32_t { F32 = 0, F16 = 1 };

/// A metadata value. Arrays hold their elements as a vector of Value
/// (strings of an array of strings, numbers widened to the variant below).
struct Value {
  ValueType type = ValueType::UINT8;
  /// Scalars: integers as int64_t/uint64_t, floats as double, bool, string;
  /// arrays: std::vector<Value> plus `array_type`.
  std::variant<uint64_t, int64_t, double, bool, std::string, std::vector<Value>> data;
  ValueType array_type = ValueType::UINT8;  ///< element type when type == ARRAY
};

/// One tensor's description. `dims` are in ggml order: dims[0] is the
/// fastest-varying (row length), so a GGUF matrix with dims {K, N} is stored
/// row-major as N rows of K elements (PyTorch's [N, K] Linear weight).
struct TensorInfo {
  std::string name;
  std::vector<uint64_t> dims;
  TensorType type = TensorType::F32;
  uint64_t offset = 0;          ///< bytes from the start of the data section
  const std::byte* data = nullptr;  ///< into the mapping, validated in range
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
};

/// A validated, memory-mapped GGUF file. Immutable after construction.
class File {
 public:
  /// Maps and validates `path`. Throws kveval::FormatError (one line naming
  /// the file and the key/tensor/offset at fault) on: missing/unreadable file,
  /// bad magic, unsupported version, counts or lengths past the end of the
  /// file, unknown value or tensor types, duplicate keys or tensor names,
  /// misaligned or out-of-range tensor data, a data section cut short.
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&&) noexcept;
  File& operator=(File&&) noexcept;

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;  ///< general.alignment, default 32

  /// All metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const;
  /// The value for `key`, or nullptr.
  const Value* find(std::string_view key) const;

  // Typed getters. The `*_or` forms return `def` when the key is absent;
  // the others throw FormatError "<file>: missing key 'K'". Any type mismatch
  // throws FormatError "<file>: key 'K' has type T, expected U".
  uint64_t get_uint(std::string_view key) const;  ///< any unsigned/signed integer >= 0
  uint64_t get_uint_or(std::string_view key, uint64_t def) const;
  double get_float(std::string_view key) const;   ///< float32/float64 (integers accepted)
  double get_float_or(std::string_view key, double def) const;
  std::string get_string(std::string_view key) const;
  std::string get_string_or(std::string_view key, std::string def) const;
  bool get_bool_or(std::string_view key, bool def) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_float_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;

  /// All tensors in file order.
  const std::vector<TensorInfo>& tensors() const;
  /// The tensor called `name`, or nullptr.
  const TensorInfo* find_tensor(std::string_view name) const;
  /// The tensor called `name`; throws FormatError "<file>: missing tensor 'name'".
  const TensorInfo& tensor(std::string_view name) const;
  /// The tensor's elements as float32 (F16 converted). Throws FormatError
  /// if the tensor is missing or `expected_dims` (ggml order) does not match.
  std::vector<float> tensor_f32(std::string_view name, std::span<const uint64_t> expected_dims) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// IEEE half -> float (exact).
float f16_to_f32(uint16_t h);
/// float -> IEEE half, round to nearest even.
uint16_t f32_to_f16(float f);

}  // namespace kveval::gguf
