#pragma once
// The one-line load summary that `kveval run`, `generate` and `bench` print:
// architecture, parameters, tensor types found, weight dtype in memory,
// resident bytes, context length, tokenizer kind/pre, load seconds.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kveval::gguf { class File; }

namespace kveval {

/// What a model load found and produced.
struct LoadSummary {
  std::string architecture;     ///< general.architecture
  uint64_t parameters = 0;      ///< elements of all tensors in the file (file_parameters, cost.hpp)
  /// Tensor type name -> number of tensors of that type, most frequent first
  /// (ties in the order of gguf::supported_types()).
  std::vector<std::pair<std::string, uint64_t>> tensor_types;
  uint64_t file_tensor_bytes = 0;  ///< bytes of tensor data in the file
  std::string weight_dtype;        ///< element type of the weights in memory ("F32")
  uint64_t resident_bytes = 0;     ///< bytes of weights held in memory after conversion
  /// Bytes of resident_bytes that only the embedding lookup reads (one row per token): token_embd's F32 rows or
  /// kept blocks; 0 when a tied output multiplies token_embd's own blocks (a decode step streams them).
  uint64_t lookup_only_bytes = 0;
  /// Bytes of resident_bytes read in place from the file's mapping (ModelOptions::map_weights: matrices kept in a
  /// file-block type), 0 when every weight was copied.
  uint64_t mapped_bytes = 0;
  /// ModelOptions::map_weights was asked for but no matrix is kept in a file-block type (nothing read in place).
  bool map_ignored = false;
  /// How decode steps on kept blocks multiply: "exact" or "int8" (ModelOptions::matmul).
  std::string matmul = "exact";
  /// --matmul int8 was asked for but no matrix is kept in a block type it multiplies (matmul stays "exact").
  bool matmul_int8_ignored = false;
  uint64_t context_length = 0;     ///< `<arch>.context_length` (tokens), 0 when absent
  std::string tokenizer_model;     ///< tokenizer.ggml.model ("llama", "gpt2", ...), "" when absent
  std::string tokenizer_pre;       ///< tokenizer.ggml.pre ("llama-bpe", ...), "" when absent
  double load_seconds = 0;         ///< wall time of Model::load
  /// Sliding-window attention: "sliding window 4096 on 13 of 26 layers", "" when no layer slides.
  std::string sliding;
  /// LongRoPE: "LongRoPE long factors (context 16 > original 8), attention factor 1.19", "" without factor sets.
  std::string longrope;
  std::vector<std::string> warnings;  ///< the file's gguf::File::warnings(), one line each
};

/// The fields that come from the file alone (architecture, parameters, tensor
/// types, file tensor bytes, context length, tokenizer keys, warnings); the others stay
/// zero/empty for the loader to fill. Throws FormatError for a metadata key of
/// the wrong type.
LoadSummary summarize_gguf(const gguf::File& f);

/// "load: llama, 24.70M parameters, tensors Q4_K x98, Q6_K x1, F32 x65 (13.9 MiB in file);
/// weights F32 in memory, 94.2 MiB resident; context 2048; tokenizer llama; 0.120 s"
/// (tokenizer "gpt2/llama-bpe" when a pre-tokenizer is named); with `matmul` "int8",
/// "; matmul int8 (decode steps on Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks with int8 activations)" before the time; then
/// with `sliding` set, "; sliding window 4096 on 13 of 26 layers (those read at most 4096 cached positions and keep
/// at most 4223 per KV cache row)"; then
/// with `longrope` set "; " and it. With `mapped_bytes` the weights part reads "weights Q4_K+Q6_K in memory, 14.0 MiB
/// resident (13.5 MiB of them read in place from the file's mapping)"; with `map_ignored`, "; --mmap ignored (no
/// matrix kept in Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K..Q6_K blocks)" before the time.
std::string format_load_summary(const LoadSummary& s);

}  // namespace kveval
