#pragma once
// Patched copies of a GGUF model for tests (a changed key, a dropped tensor),
// written with the project's GGUF writer.
#include <map>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

namespace kveval::test {

/// Writes to `dst` a copy of the GGUF file `src`: the same keys in the same
/// order with the values in `replace` substituted (a key of `replace` that
/// `src` lacks is appended), and every tensor but those named in `drop`, as
/// F32 (F16 tensors are widened), each tensor named in `scale` multiplied by
/// its factor. general.alignment is left to the writer's default (32). Throws
/// what gguf::File and gguf::Writer throw.
inline void copy_gguf(const std::string& src, const std::string& dst,
                      const std::map<std::string, gguf::Value>& replace = {}, const std::set<std::string>& drop = {},
                      const std::map<std::string, float>& scale = {}) {
  gguf::File f(src);
  gguf::Writer w;
  std::set<std::string> done;
  for (const auto& [k, v] : f.metadata()) {
    if (k == "general.alignment") continue;
    auto it = replace.find(k);
    w.add(k, it == replace.end() ? v : it->second);
    done.insert(k);
  }
  for (const auto& [k, v] : replace)
    if (!done.count(k)) w.add(k, v);
  for (const auto& t : f.tensors()) {
    if (drop.count(t.name)) continue;
    std::vector<float> x = f.tensor_f32(t.name, t.dims);
    if (auto it = scale.find(t.name); it != scale.end())
      for (float& v : x) v *= it->second;
    w.add_tensor(t.name, t.dims, x);
  }
  w.write(dst);
}

/// A uint32 GGUF value (for copy_gguf's `replace`).
inline gguf::Value u32_value(uint32_t v) { return gguf::Value{gguf::ValueType::UINT32, uint64_t{v}}; }

}  // namespace kveval::test

namespace kveval::test {

/// Id of the vocabulary piece `piece` (tokenizer.ggml.tokens) of the GGUF file
/// `path`; -1 when there is none.
inline int32_t piece_id(const std::string& path, const std::string& piece) {
  gguf::File f(path);
  const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == piece) return static_cast<int32_t>(i);
  return -1;
}

/// Writes to `dst` a copy of the model `src` whose EOS (tokenizer.ggml.eos_token_id)
/// is the piece "." : greedy stories end sentences with it, so EOS becomes
/// reachable. Returns the id of ".".
inline int32_t write_eos_dot_copy(const std::string& src, const std::string& dst) {
  const int32_t dot = piece_id(src, ".");
  if (dot < 0) throw std::runtime_error(src + ": no piece \".\" in the vocabulary");
  copy_gguf(src, dst, {{"tokenizer.ggml.eos_token_id", u32_value(static_cast<uint32_t>(dot))}});
  return dot;
}

}  // namespace kveval::test
