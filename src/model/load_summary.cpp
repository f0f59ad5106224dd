// Load summary: see load_summary.hpp.
#include "model/load_summary.hpp"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "model/cost.hpp"
#include "model/gguf.hpp"

namespace kveval {

LoadSummary summarize_gguf(const gguf::File& f) {
  LoadSummary s;
  s.architecture = f.get_string_or("general.architecture", "");
  s.warnings = f.warnings();
  std::map<gguf::TensorType, uint64_t> counts;
  s.parameters = file_parameters(f);
  for (const auto& t : f.tensors()) {
    s.file_tensor_bytes += t.n_bytes;
    ++counts[t.type];
  }
  const auto order = gguf::supported_types();
  auto rank = [&](gguf::TensorType t) { return std::find(order.begin(), order.end(), t) - order.begin(); };
  std::vector<std::pair<gguf::TensorType, uint64_t>> v(counts.begin(), counts.end());
  std::stable_sort(v.begin(), v.end(), [&](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : rank(a.first) < rank(b.first);
  });
  for (const auto& [t, n] : v) s.tensor_types.emplace_back(gguf::type_name(t), n);
  if (!s.architecture.empty()) s.context_length = f.get_uint_or(s.architecture + ".context_length", 0);
  s.tokenizer_model = f.get_string_or("tokenizer.ggml.model", "");
  s.tokenizer_pre = f.get_string_or("tokenizer.ggml.pre", "");
  return s;
}

std::string format_load_summary(const LoadSummary& s) {
  std::string types;
  for (const auto& [name, n] : s.tensor_types) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, n);
  const double mib = 1024.0 * 1024.0;
  std::string tok = s.tokenizer_model.empty() ? "none" : s.tokenizer_model;
  if (!s.tokenizer_pre.empty()) tok += "/" + s.tokenizer_pre;
  const std::string mapped =
      s.mapped_bytes > 0
          ? fmt::format(" ({:.1f} MiB of them read in place from the file's mapping)", static_cast<double>(s.mapped_bytes) / mib)
          : std::string();
  return fmt::format(
      "load: {}, {:.2f}M parameters, tensors {} ({:.1f} MiB in file); weights {} in memory, {:.1f} MiB resident{}; "
      "context {}; tokenizer {}{}{}{}{}; {:.3f} s",
      s.architecture.empty() ? "?" : s.architecture, static_cast<double>(s.parameters) / 1e6,
      types.empty() ? "none" : types, static_cast<double>(s.file_tensor_bytes) / mib, s.weight_dtype,
      static_cast<double>(s.resident_bytes) / mib, mapped, s.context_length, tok,
      s.matmul == "int8"       ? "; matmul int8 (decode steps on Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks with int8 activations)"
      : s.matmul_int8_ignored ? "; --matmul int8 ignored (no matrix kept in Q8_0/Q4_0/Q4_K/Q5_K/Q6_K blocks)"
                              : "",
      s.map_ignored ? "; --mmap ignored (no matrix kept in Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K..Q6_K blocks)" : "",
      s.sliding.empty() ? "" : "; " + s.sliding, s.longrope.empty() ? "" : "; " + s.longrope, s.load_seconds);
}

}  // namespace kveval
