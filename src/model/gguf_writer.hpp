#pragma once
// GGUF v3 writer: used to write random-weight models for benchmarks
// (`kveval make-model`) and crafted files for the reader's tests.
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/gguf.hpp"

namespace kveval::gguf {

/// Builds a GGUF file in memory, then writes it. Keys and tensors are written
/// in insertion order; tensor data is aligned to `general.alignment` (32
/// unless a `general.alignment` uint32 key is added), padding is zero bytes.
class Writer {
 public:
  /// Fills `out` with the elements [first, first + out.size()) of a tensor
  /// (flat index in ggml order). Called at write time, possibly several times
  /// per tensor and for any chunk, so it must be a pure function of the index.
  using Fill = std::function<void(uint64_t first, std::span<float> out)>;

  /// Adds a key. Throws ArgumentError if the value's `data` alternative does
  /// not match its `type` (or an array element its `array_type`).
  void add(const std::string& key, Value value);
  void add_uint32(const std::string& key, uint32_t v);
  void add_float32(const std::string& key, float v);
  void add_string(const std::string& key, const std::string& v);
  void add_bool(const std::string& key, bool v);
  void add_string_array(const std::string& key, const std::vector<std::string>& v);
  void add_float32_array(const std::string& key, const std::vector<float>& v);
  void add_int32_array(const std::string& key, const std::vector<int32_t>& v);

  /// Adds a tensor; `dims` in ggml order (dims[0] fastest); `data` holds
  /// prod(dims) floats and is stored as `type`: F32, F16/BF16 (round to
  /// nearest even) or a quantized type (kveval's quantizers, quant/quant.hpp).
  /// Throws ArgumentError if the sizes differ, the type cannot be written or
  /// dims[0] is not a multiple of its block size.
  void add_tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& data,
                  TensorType type = TensorType::F32);
  /// Adds a tensor whose elements are produced by `fill` while writing, so a
  /// file larger than memory can be streamed (see Fill).
  void add_tensor(const std::string& name, std::vector<uint64_t> dims, Fill fill, TensorType type = TensorType::F32);

  /// The keys added so far, in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  /// The tensors added so far, in file order, as the file will describe them
  /// (name, dims, type, offset in the data section, n_elements, n_bytes; `data`
  /// null): nothing is generated or encoded.
  std::vector<TensorInfo> tensor_infos() const;
  /// Bytes write() will produce: the padded header plus every tensor's data
  /// padded to the alignment. Nothing is generated or encoded.
  uint64_t file_size() const;

  /// The complete file image.
  std::vector<uint8_t> bytes() const;
  /// Writes the file to `path`, streaming tensor data in chunks; returns the
  /// bytes written. Throws kveval::Error on I/O failure.
  uint64_t write(const std::string& path) const;

 private:
  struct PendingTensor {
    std::string name;
    std::vector<uint64_t> dims;
    TensorType type;
    std::vector<uint8_t> payload;  ///< encoded data when added from a vector
    Fill fill;                     ///< otherwise generated at write time
    uint64_t n_elements = 0;
  };
  uint64_t alignment() const;
  std::vector<uint8_t> header() const;  ///< everything before the data section, padded
  template <class Sink>
  void emit(Sink&& sink) const;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
};

}  // namespace kveval::gguf
