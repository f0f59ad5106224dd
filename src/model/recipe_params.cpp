// The recipe's numbers of a GGUF file: see recipe_params.hpp.
#include "model/recipe_params.hpp"

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "backend/backend.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

/// Refuses {arch}.attention.sliding_window_pattern (llama.cpp's per-file override:
/// an integer n, layer l slides when n == 0 or l % n < n - 1, or one bool per
/// layer) when it names other sliding layers than the recipe.
void check_sliding_pattern(const gguf::File& f, const arch::Description& d, const HParams& hp) {
  const std::string k = std::string(d.name) + ".attention.sliding_window_pattern";
  const gguf::Value* v = f.find(k);
  if (!v || hp.sliding_window == 0) return;
  std::vector<bool> file(static_cast<size_t>(hp.n_layer));
  if (v->type == gguf::ValueType::ARRAY) {
    const auto& a = std::get<std::vector<gguf::Value>>(v->data);
    if (a.size() != file.size() || v->array_type != gguf::ValueType::BOOL)
      throw FormatError(fmt::format("{}: key '{}' must be {} bools (one per layer) or an integer", f.path(), k,
                                    hp.n_layer));
    for (size_t l = 0; l < a.size(); ++l) file[l] = std::get<bool>(a[l].data);
  } else {
    const uint64_t n = f.get_uint(k);
    for (size_t l = 0; l < file.size(); ++l) file[l] = n == 0 || l % n < n - 1;
  }
  for (int l = 0; l < hp.n_layer; ++l)
    if (file[static_cast<size_t>(l)] != (!d.sliding_layer || d.sliding_layer(l)))
      throw FormatError(fmt::format("{}: key '{}' makes layer {} {}; kveval supports only architecture '{}''s own "
                                    "pattern",
                                    f.path(), k, l, file[static_cast<size_t>(l)] ? "sliding" : "global", d.name));
}

/// {arch}.rope.scaling.finetuned (bool): llama.cpp reads it for every
/// architecture (llama-model.cpp load_hparams: rope_finetuned, printed, used
/// for no arithmetic) and, for granite, as the RoPE switch
/// (src/models/granite.cpp: absent = true; false = no RoPE on any layer; the
/// Granite converter writes true for attention-only files). Accepted and
/// ignored, except granite's false, which is refused: kveval always rotates.
void check_rope_finetuned(const gguf::File& f, const arch::Description& d) {
  const std::string k = std::string(d.name) + ".rope.scaling.finetuned";
  if (d.name == "granite" && !f.get_bool_or(k, true))
    throw FormatError(fmt::format("{}: key '{}' is false: architecture 'granite' then runs without RoPE (llama.cpp's "
                                  "switch), which kveval does not support",
                                  f.path(), k));
}

}  // namespace

void read_recipe_numbers(const gguf::File& f, const arch::Description& d, HParams& hp) {
  auto resolve = [&](const arch::Param& p, const char* what) {
    const std::string k = p.key.empty() ? std::string() : std::string(d.name) + "." + std::string(p.key);
    if (p.required && !f.find(k))
      throw FormatError(fmt::format("{}: key '{}' ({}) is missing; architecture '{}' needs it", f.path(), k, what, d.name));
    const double v = !k.empty() && f.find(k) ? f.get_float(k) : p.derive ? p.derive(hp) : p.value;
    const std::string src = k.empty() ? "architecture '" + std::string(d.name) + "'" : "key '" + k + "'";
    if (!(std::isfinite(v) && v >= 0.0 && v <= 1e30))
      throw FormatError(fmt::format("{}: {} = {} ({}) must be 0 (off) or a positive finite number", f.path(), what, v, src));
    if (p.positive && !(static_cast<float>(v) > 0.0f))
      throw FormatError(fmt::format("{}: {} = {} ({}) must be positive for architecture '{}'", f.path(), what, v, src,
                                    d.name));
    return static_cast<float>(v);
  };
  hp.embd_scale = resolve(d.embd_scale, "embedding scale");
  hp.residual_scale = resolve(d.residual_scale, "residual scale");
  hp.attn_scale = resolve(d.attn_scale, "attention scale");
  hp.attn_softcap = resolve(d.attn_softcap, "attention logit soft-cap");
  hp.logit_scale = resolve(d.logit_scale, "logit scale");
  hp.final_softcap = resolve(d.final_softcap, "final logit soft-cap");
  const float rope_attn = resolve(d.rope_attn_factor, "RoPE attention factor");
  if (rope_attn > 16.0f)  // real models: 1 .. 1.2 (sqrt(1 + ln(32) / ln(4096)) = 1.19 for Phi-3.5)
    throw FormatError(fmt::format("{}: RoPE attention factor {} (key '{}.{}') must be in (0, 16]", f.path(), rope_attn,
                                  d.name, d.rope_attn_factor.key));
  hp.rope_attn_factor = rope_attn != 0.0f ? rope_attn : 1.0f;
  const float window = resolve(d.sliding_window, "sliding window");
  if (window != std::floor(window) || window > float(1 << 24))
    throw FormatError(fmt::format("{}: sliding window {} must be an integer in [0, {}]", f.path(), window, 1 << 24));
  hp.sliding_window = static_cast<int>(window);
  check_sliding_pattern(f, d, hp);
  check_rope_finetuned(f, d);
  const float base_swa = resolve(d.rope_base_swa, "sliding layers' RoPE base");
  if (base_swa != 0.0f && !(base_swa > 1.0f))
    throw FormatError(fmt::format("{}: sliding layers' RoPE base {} must be > 1", f.path(), base_swa));
  hp.rope_freq_base_swa = base_swa != 0.0f ? base_swa : hp.rope_freq_base;
  hp.rope_freq_scale_swa = d.swa_rope_unscaled ? 1.0f : hp.rope_freq_scale;
}

/// The load line's note on sliding-window layers ("" when none slides).
std::string sliding_summary(const HParams& hp, const arch::Description& d) {
  int n = 0;
  for (int l = 0; l < hp.n_layer; ++l) n += hp.sliding_window > 0 && (!d.sliding_layer || d.sliding_layer(l));
  if (n == 0) return "";
  const bool own_rope = hp.rope_freq_base_swa != hp.rope_freq_base || hp.rope_freq_scale_swa != hp.rope_freq_scale;
  // KvCache::cells_for: window - 1 + the attention's query block.
  return fmt::format("sliding window {} on {} of {} layers (those read at most {} cached positions and keep at "
                     "most {} per KV cache row{})",
                     hp.sliding_window, n, hp.n_layer, hp.sliding_window,
                     int64_t{hp.sliding_window} - 1 + backend::kAttentionQueryBlock,
                     own_rope ? fmt::format(", RoPE base {} scale {}", hp.rope_freq_base_swa, hp.rope_freq_scale_swa)
                              : "");
}


}  // namespace kveval
