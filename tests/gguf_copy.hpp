#pragma once
// Edited copies of a GGUF model for tests, written with the project's GGUF
// writer: a changed or dropped key, a dropped or scaled tensor (copy_gguf,
// everything widened to F32), edited metadata or weights with the tensor types
// kept (write_variant: bad hyper-parameters, weights that make the forward
// pass non-finite), and a copy whose EOS is reachable.
#include <functional>
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

namespace kveval::test {

/// What to change in the copy.
struct GgufEdit {
  std::map<std::string, gguf::Value> set;  ///< keys replaced (in place) or appended
  std::vector<std::string> drop;           ///< keys left out
  /// Called with each tensor's name and float data (ggml order) before it is written.
  std::function<void(const std::string& name, std::vector<float>& data)> tensor;
};

/// Writes `dst`: the GGUF at `src` with `edit` applied (general.alignment dropped:
/// the writer uses its default). Tensors keep their names, shapes and order; F16 stays F16.
inline void write_variant(const std::string& src, const std::string& dst, const GgufEdit& edit) {
  gguf::File f(src);
  gguf::Writer w;
  std::map<std::string, gguf::Value> pending = edit.set;
  for (const auto& [k, v] : f.metadata()) {
    if (k == "general.alignment") continue;
    bool dropped = false;
    for (const auto& d : edit.drop) dropped |= d == k;
    if (dropped) continue;
    if (auto it = pending.find(k); it != pending.end()) {
      w.add(k, it->second);
      pending.erase(it);
    } else {
      w.add(k, v);
    }
  }
  for (const auto& [k, v] : pending) w.add(k, v);
  for (const auto& t : f.tensors()) {
    std::vector<float> data = f.tensor_f32(t.name, t.dims);
    if (edit.tensor) edit.tensor(t.name, data);
    w.add_tensor(t.name, t.dims, data, t.type);
  }
  w.write(dst);
}

/// A float32 metadata value.
inline gguf::Value f32_value(double v) { return gguf::Value{gguf::ValueType::FLOAT32, v}; }

}  // namespace kveval::test
