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

#include "model/tensor_types.hpp"

namespace kveval::gguf {

/// Metadata value types, numbered as in the GGUF spec.
enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};

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
  uint64_t n_bytes = 0;         ///< n_elements / block_size * type_size
  /// Elements per row (dims[0]); a multiple of the type's block size.
  uint64_t row_length() const { return dims.empty() ? 0 : dims[0]; }
  /// Rows: n_elements / row_length().
  uint64_t n_rows() const { return dims.empty() ? 0 : n_elements / dims[0]; }
  /// Bytes of one row: row_length() / block_size * type_size.
  uint64_t row_bytes() const { return dims.empty() ? 0 : n_bytes / n_rows(); }
};

/// A validated, memory-mapped GGUF file. Immutable after construction.
class File {
 public:
  /// Maps and validates `path`. Throws kveval::FormatError (one line naming
  /// the file and the key/tensor/offset at fault) on: missing/unreadable file,
  /// bad magic, unsupported version, counts or lengths past the end of the
  /// file, unknown value or tensor types, tensor types kveval does not read
  /// (IQ*, TQ*, Q8_K, MXFP4, ...: named), rows that are not a multiple of the
  /// type's block size, duplicate keys or tensor names, misaligned or
  /// out-of-range tensor data, a data section cut short (truncated blocks).
  explicit File(const std::string& path);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  File(File&&) noexcept;
  File& operator=(File&&) noexcept;

  const std::string& path() const;
  uint32_t version() const;
  uint64_t alignment() const;  ///< general.alignment, default 32
  /// Offset in the file of the tensor data section (bytes); TensorInfo::offset is relative to it.
  uint64_t data_offset() const;
  /// One line per suspicious layout the file still loads with (alignment_warning), each
  /// naming the file; empty for a clean file. Callers print them (the reader does not).
  const std::vector<std::string>& warnings() const;
  /// The whole mapped file (read-only). Reading it faults with SIGBUS if the
  /// file is truncated meanwhile: see util/sigbus_guard.hpp.
  std::span<const std::byte> bytes() const;
  /// Drops the pages wholly inside [p, p + n) (a range of bytes()) from this process's resident set
  /// (madvise MADV_DONTNEED): the file stays mapped and a later read faults them in again from the
  /// page cache. The loader calls it on each tensor once copied, so the file's pages do not add to the
  /// peak RSS. Advice only: a range outside the mapping or a failing call is ignored.
  void release(const std::byte* p, uint64_t n) const;
  /// Shared ownership of the mapping behind bytes(): it stays mapped (and every TensorInfo::data valid)
  /// while a copy of this handle lives, even after the File is destroyed. Weights that read the file's
  /// blocks in place hold one (backend::Weight::view_file_blocks).
  std::shared_ptr<const void> mapping() const;

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
  /// The tensor's elements as float32 (any supported type dequantized, no
  /// finite check). Throws FormatError if the tensor is missing or
  /// `expected_dims` (ggml order) does not match.
  std::vector<float> tensor_f32(std::string_view name, std::span<const uint64_t> expected_dims) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// `dims` without trailing 1 dimensions (at least one dimension kept): ggml
/// pads every shape to 4 dimensions with 1s, so [64, 1, 1, 1] is the vector [64].
/// File keeps every tensor's dims in this form.
std::vector<uint64_t> trim_trailing_ones(std::span<const uint64_t> dims);
/// Whether two ggml shapes are equal once trailing 1 dimensions are dropped
/// (llama.cpp's check_tensor_dims compares missing dimensions as 1).
bool same_shape(std::span<const uint64_t> a, std::span<const uint64_t> b);

/// The warning (one line, starting "<path>: ") for tensor data that look
/// laid out for a larger alignment than `alignment` (general.alignment, `declared`
/// or the default 32), or "": readers (llama.cpp's too) take the data section to
/// start at `header_end` rounded up to `alignment`, so a file written for 32 whose
/// key says 16 is read with every weight shifted, silently. It fires for the
/// smallest power of two A > alignment that divides every tensor offset and would
/// (1) start the data section elsewhere, (2) still fit every tensor in `file`, and
/// (3) skip only zero bytes (a writer's padding). Offsets being multiples of a
/// larger power of two alone is common in valid files (tensor sizes are); (2) is
/// what rules those out: a writer ends the file within `alignment` bytes of the
/// last tensor, so no later data section fits.
std::string alignment_warning(const std::string& path, uint64_t alignment, bool declared, uint64_t header_end,
                              std::span<const uint8_t> file, const std::vector<TensorInfo>& tensors);

/// IEEE half -> float (exact).
float f16_to_f32(uint16_t h);
/// float -> IEEE half, round to nearest even.
uint16_t f32_to_f16(float f);
/// bfloat16 -> float (exact: the high 16 bits of a float32).
float bf16_to_f32(uint16_t h);
/// float -> bfloat16, round to nearest even, NaN kept quiet (ggml_compute_fp32_to_bf16).
uint16_t f32_to_bf16(float f);

}  // namespace kveval::gguf
