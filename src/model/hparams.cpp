// Llama hyper-parameters from GGUF `llama.*` keys (llama.cpp's names), each
// checked against the range kveval computes correctly: a value outside it is
// refused with one line naming the key, never turned into wrong metrics.
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/model.hpp"
#include "util/error.hpp"

namespace kveval {

HParams read_hparams(const gguf::File& f) {
  const std::string& path = f.path();
  const std::string arch = f.get_string_or("general.architecture", "");
  if (arch != "llama")
    throw FormatError(fmt::format("{}: unsupported architecture '{}' (general.architecture); kveval supports 'llama'",
                                  path, arch));
  HParams hp;
  auto get_int = [&](const char* key, uint64_t lo, uint64_t hi) {
    uint64_t v = f.get_uint(key);
    if (v < lo || v > hi) throw FormatError(fmt::format("{}: key '{}' = {} out of range [{}, {}]", path, key, v, lo, hi));
    return static_cast<int>(v);
  };
  // A float key: finite and inside [lo, hi] (lo excluded when `open_lo`), and still inside once rounded to float.
  auto get_real = [&](const char* key, double def, double lo, double hi, bool open_lo) {
    const double v = f.get_float_or(key, def);
    const float vf = static_cast<float>(v);
    const bool ok = std::isfinite(v) && (open_lo ? v > lo : v >= lo) && v <= hi && std::isfinite(vf) &&
                    (open_lo ? vf > static_cast<float>(lo) : vf >= static_cast<float>(lo));
    if (!ok)
      throw FormatError(fmt::format("{}: key '{}' = {} out of range {}{}, {}]", path, key, v, open_lo ? "(" : "[", lo, hi));
    return vf;
  };
  hp.n_embd = get_int("llama.embedding_length", 1, 1 << 16);
  hp.n_layer = get_int("llama.block_count", 1, 1024);
  hp.n_head = get_int("llama.attention.head_count", 1, 1024);
  hp.n_head_kv = f.find("llama.attention.head_count_kv") ? get_int("llama.attention.head_count_kv", 1, 1024) : hp.n_head;
  hp.n_ff = get_int("llama.feed_forward_length", 1, 1 << 20);
  hp.n_ctx_train = get_int("llama.context_length", 1, 1 << 24);
  // RoPE base: > 1 so frequencies fall with the dimension (Su et al. 2021); real models use 1e4 .. 1e8.
  hp.rope_freq_base = get_real("llama.rope.freq_base", 10000.0, 1.0, 1e12, true);
  // RMSNorm epsilon: real models use 1e-6 .. 1e-5.
  hp.rms_eps = get_real("llama.attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0, true);
  if (hp.n_embd % hp.n_head != 0)
    throw FormatError(fmt::format("{}: key 'llama.embedding_length' = {} is not a multiple of 'llama.attention.head_count' = {}",
                                  path, hp.n_embd, hp.n_head));
  if (hp.n_head % hp.n_head_kv != 0)
    throw FormatError(fmt::format("{}: key 'llama.attention.head_count' = {} is not a multiple of "
                                  "'llama.attention.head_count_kv' = {}",
                                  path, hp.n_head, hp.n_head_kv));
  hp.n_rot = f.find("llama.rope.dimension_count") ? get_int("llama.rope.dimension_count", 2, hp.head_dim())
                                                  : hp.head_dim();
  if (hp.n_rot % 2 != 0)
    throw FormatError(fmt::format("{}: key 'llama.rope.dimension_count' = {} must be even", path, hp.n_rot));
  // Keys that change the computation in ways kveval does not implement: refuse instead of computing something else.
  for (const char* key : {"llama.attention.key_length", "llama.attention.value_length"})
    if (f.find(key) && f.get_uint(key) != static_cast<uint64_t>(hp.head_dim()))
      throw FormatError(fmt::format("{}: key '{}' = {} differs from embedding_length / head_count = {} (unsupported)",
                                    path, key, f.get_uint(key), hp.head_dim()));
  if (f.find("llama.expert_count") && f.get_uint("llama.expert_count") > 0)
    throw FormatError(fmt::format("{}: key 'llama.expert_count' = {}: mixture-of-experts models are not supported", path,
                                  f.get_uint("llama.expert_count")));
  if (const std::string t = f.get_string_or("llama.rope.scaling.type", "none"); t != "none")
    throw FormatError(fmt::format("{}: key 'llama.rope.scaling.type' = '{}': RoPE scaling is not supported", path, t));
  if (f.find("llama.rope.scale_linear")) {
    const double s = f.get_float("llama.rope.scale_linear");
    if (s != 1.0)
      throw FormatError(fmt::format("{}: key 'llama.rope.scale_linear' = {}: RoPE scaling is not supported", path, s));
  }

  const gguf::TensorInfo& te = f.tensor("token_embd.weight");
  if (te.dims.size() != 2 || te.dims[0] != static_cast<uint64_t>(hp.n_embd))
    throw FormatError(fmt::format("{}: tensor 'token_embd.weight' has shape {} (expected [{}, n_vocab])", path,
                                  fmt::join(te.dims, "x"), hp.n_embd));
  if (te.dims[1] > (uint64_t{1} << 24))
    throw FormatError(fmt::format("{}: tensor 'token_embd.weight' has {} rows (n_vocab), more than {}", path, te.dims[1],
                                  uint64_t{1} << 24));
  hp.n_vocab = static_cast<int>(te.dims[1]);
  hp.tied_output = f.find_tensor("output.weight") == nullptr;
  return hp;
}

uint64_t estimate_weight_bytes(const gguf::File& f, DType dtype) {
  uint64_t elements = 0;
  for (const gguf::TensorInfo& t : f.tensors()) elements += t.n_elements;
  // A tied output projection is a second, transposed copy of token_embd.
  if (f.find_tensor("output.weight") == nullptr)
    if (const gguf::TensorInfo* te = f.find_tensor("token_embd.weight")) elements += te->n_elements;
  return elements * dtype_size(dtype);
}

}  // namespace kveval
