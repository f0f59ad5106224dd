// The {arch}.* hyper-parameters of a GGUF file: see read_hparams.hpp.
#include "model/read_hparams.hpp"

#include <cmath>
#include <string>

#include <fmt/format.h>

#include "model/recipe_params.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

/// Linear rope scaling of architecture `a` into hp.rope_freq_scale (1 = none).
void read_rope_scaling(const gguf::File& f, const std::string& a, HParams& hp) {
  // Rope scaling (llama.cpp): type defaults to "linear"; the factor is
  // rope.scaling.factor, or the older rope.scale_linear; 0 or absent = 1.
  // Type "none" never scales. YaRN and the LongRoPE type change more than the
  // frequencies (attention factor, per-dimension ramps) and are refused; Phi-3's
  // LongRoPE comes as factor tensors and rope.scaling.attn_factor (load_rope_factors).
  const std::string& path = f.path();
  const std::string type_key = a + ".rope.scaling.type";
  const std::string type = f.get_string_or(type_key, "linear");
  if (type != "none" && type != "linear")
    throw FormatError(fmt::format("{}: rope scaling type '{}' (key '{}') is not supported; kveval supports 'none', "
                                  "'linear' and the rope_freqs factors of Llama 3.1",
                                  path, type, type_key));
  std::string factor_key = a + ".rope.scaling.factor";
  if (!f.find(factor_key)) factor_key = a + ".rope.scale_linear";
  // Real models use factors 2 .. 64; anything in (1e-3, 1e3] computes correctly.
  const double factor = f.get_float_or(factor_key, 0.0);
  if (!std::isfinite(factor) || factor < 0.0 || (factor > 0.0 && factor < 1e-3) || factor > 1e3)
    throw FormatError(fmt::format("{}: key '{}' = {} out of range: 0 (none) or a factor in [0.001, 1000]", path,
                                  factor_key, factor));
  hp.rope_freq_scale = (type == "none" || factor == 0.0) ? 1.0f : static_cast<float>(1.0 / factor);
}

}  // namespace

void read_hparams(const gguf::File& f, const arch::Description& d, HParams& hp) {
  const std::string& path = f.path();
  const std::string a(d.name);
  auto key = [&](const char* k) { return a + "." + k; };
  auto get_int = [&](const std::string& k, uint64_t lo, uint64_t hi) {
    const uint64_t v = f.get_uint(k);
    if (v < lo || v > hi) throw FormatError(fmt::format("{}: key '{}' = {} out of range [{}, {}]", path, k, v, lo, hi));
    return static_cast<int>(v);
  };
  auto get_int_or = [&](const std::string& k, uint64_t lo, uint64_t hi, int def) {
    return f.find(k) ? get_int(k, lo, hi) : def;
  };
  // A float key: finite, in (lo, hi], and still > lo once rounded to float.
  auto get_real = [&](const std::string& k, double def, double lo, double hi) {
    const double v = f.get_float_or(k, def);
    const float vf = static_cast<float>(v);
    if (!(std::isfinite(v) && v > lo && v <= hi && vf > static_cast<float>(lo)))
      throw FormatError(fmt::format("{}: key '{}' = {} out of range ({}, {}]", path, k, v, lo, hi));
    return vf;
  };
  hp.arch = a;
  hp.n_embd = get_int(key("embedding_length"), 1, 1 << 16);
  hp.n_layer = get_int(key("block_count"), 1, 1024);
  hp.n_head = get_int(key("attention.head_count"), 1, 1024);
  hp.n_head_kv = get_int_or(key("attention.head_count_kv"), 1, 1024, hp.n_head);
  hp.n_ff = get_int(key("feed_forward_length"), 1, 1 << 20);
  hp.n_ctx_train = get_int(key("context_length"), 1, 1 << 24);
  if (const int n_expert = get_int_or(key("expert_count"), 0, 1 << 16, 0); n_expert > 0)
    throw FormatError(fmt::format("{}: mixture of experts ({} = {}) is not supported", path, key("expert_count"), n_expert));
  if (hp.n_head % hp.n_head_kv != 0)
    throw FormatError(fmt::format("{}: {} {} is not a multiple of {} {}", path, key("attention.head_count"), hp.n_head,
                                  key("attention.head_count_kv"), hp.n_head_kv));
  // Head size: key_length/value_length when present (Qwen3, Mistral Nemo), else n_embd / n_head.
  if (!f.find(key("attention.key_length")) && hp.n_embd % hp.n_head != 0)
    throw FormatError(fmt::format("{}: {} {} is not a multiple of {} {} (and there is no {})", path,
                                  key("embedding_length"), hp.n_embd, key("attention.head_count"), hp.n_head,
                                  key("attention.key_length")));
  const int head_k = get_int_or(key("attention.key_length"), 2, 4096, hp.n_embd / hp.n_head);
  const int head_v = get_int_or(key("attention.value_length"), 2, 4096, hp.n_embd / hp.n_head);
  if (head_k != head_v)
    throw FormatError(fmt::format("{}: {} {} differs from {} {}; kveval needs equal key and value head sizes", path,
                                  key("attention.key_length"), head_k, key("attention.value_length"), head_v));
  hp.n_embd_head = head_k;
  hp.n_rot = get_int_or(key("rope.dimension_count"), 2, 1024, hp.head_dim());
  if (hp.n_rot % 2 != 0 || hp.n_rot > hp.head_dim())
    throw FormatError(fmt::format("{}: {} {} must be even and <= the head size {}", path, key("rope.dimension_count"),
                                  hp.n_rot, hp.head_dim()));
  if (d.full_rotary && hp.n_rot != hp.head_dim())  // llama.cpp: "invalid n_rot"
    throw FormatError(fmt::format("{}: {} {} must equal the head size {} for architecture '{}'", path,
                                  key("rope.dimension_count"), hp.n_rot, hp.head_dim(), a));
  hp.rope_style = d.rope;
  // RoPE base: > 1 so frequencies fall with the dimension (Su et al. 2021); real models use 1e4 .. 1e8.
  hp.rope_freq_base = get_real(key("rope.freq_base"), 10000.0, 1.0, 1e12);
  // RMSNorm epsilon, required as in llama.cpp; real models use 1e-6 .. 1e-5.
  hp.rms_eps = get_real(key("attention.layer_norm_rms_epsilon"), f.get_float(key("attention.layer_norm_rms_epsilon")),
                        0.0, 1.0);

  read_rope_scaling(f, a, hp);
  // LongRoPE's switch point (llama.cpp n_ctx_orig_yarn: the key, else context_length).
  if (d.longrope != arch::Presence::Absent)
    hp.n_ctx_orig = get_int_or(key("rope.scaling.original_context_length"), 1, 1 << 24, hp.n_ctx_train);
  read_recipe_numbers(f, d, hp);
}

}  // namespace kveval
