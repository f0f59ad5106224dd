#pragma once
// Copies of the real model with edited metadata or weights, written with the
// project's GGUF writer: for tests of bad hyper-parameters and of weights that
// make the forward pass non-finite.
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"

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
