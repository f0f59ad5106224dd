// estimate_weight_bytes (declared in model.hpp): resident weight bytes of a
// GGUF model before loading it, for the memory plan. The hyper-parameters
// themselves are read and range-checked in model_load.cpp.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"

namespace kveval {

namespace {

/// The loader fuses attn_q/k/v and ffn_gate/up of a block into one matrix (or keeps each part
/// in its own blocks) only when every part is of a kept type: the names of
/// the parts fused with tensor `name` ("blk.3.attn_k.weight" -> blk.3.attn_q/k/v),
/// or `name` alone. A recipe with fused_qkv / fused_gate_up has one of them
/// (attn_qkv, ffn_up): the others are absent from the file.
std::vector<std::string> fused_parts(const std::string& name) {
  static const std::vector<std::vector<std::string>> groups = {{"attn_q", "attn_k", "attn_v"}, {"ffn_gate", "ffn_up"}};
  const size_t a = name.find('.'), b = a == std::string::npos ? a : name.find('.', a + 1),
               c = b == std::string::npos ? b : name.find('.', b + 1);
  if (name.rfind("blk.", 0) != 0 || c == std::string::npos || name.substr(c) != ".weight") return {name};
  const std::string prefix = name.substr(0, b + 1), base = name.substr(b + 1, c - b - 1);
  for (const auto& g : groups)
    if (std::find(g.begin(), g.end(), base) != g.end()) {
      std::vector<std::string> parts;
      for (const auto& p : g) parts.push_back(prefix + p + ".weight");
      return parts;
    }
  return {name};
}

}  // namespace

uint64_t matrix_bytes(ComputeDtype d, gguf::TensorType t, bool kept, uint64_t n_elements) {
  if (!kept || !keeps(d, t)) return n_elements * dtype_size(compute_dtype_info(d).matrices);
  const backend::Dtype k = *gguf::type_info(t).kept;
  return backend::file_blocks_bytes(k, n_elements);
}

uint64_t estimate_weight_bytes(const gguf::File& f, DType dtype, ComputeDtype kept) {
  auto kept_type = [&](const gguf::TensorInfo& t) { return keeps(kept, t.type); };
  auto all_parts_kept = [&](const gguf::TensorInfo& t) {  // every part of a kept type (each in its own blocks)
    for (const std::string& p : fused_parts(t.name)) {
      const gguf::TensorInfo* pt = f.find_tensor(p);
      if (pt == nullptr) continue;  // absent: a recipe's fused tensor stands for it
      if (!kept_type(*pt)) return false;
    }
    return true;
  };
  // Bytes of a matrix: its kept blocks, or `dtype` (the loader's matrix dtype) each.
  auto bytes_of = [&](bool blocks, const gguf::TensorInfo& t) {
    return blocks ? matrix_bytes(kept, t.type, true, t.n_elements) : t.n_elements * dtype_size(dtype);
  };
  uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const bool blocks = kept_type(t) && t.dims.size() == 2 && all_parts_kept(t);
    bytes += bytes_of(blocks, t);
  }
  // A tied output projection is a second copy of token_embd in the matrix dtype, unless token_embd stays in
  // its kept blocks (the output then multiplies those blocks and the lookup decodes rows from them).
  if (f.find_tensor(arch::kOutput) == nullptr)
    if (const gguf::TensorInfo* te = f.find_tensor(arch::kTokenEmbd); te && !kept_type(*te)) bytes += bytes_of(false, *te);
  return bytes;
}

}  // namespace kveval
