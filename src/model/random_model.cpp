// Random-weight model GGUF writer: see random_model.hpp.
#include "model/random_model.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "model/arch/arch.hpp"
#include "model/gguf_writer.hpp"
#include "util/error.hpp"

namespace kveval {

namespace {

/// splitmix64's output function (Steele, Lea, Flood 2014), a bijective mixer.
constexpr uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

/// The synthetic vocabulary: specials, 256 byte tokens, then distinct pieces.
void synthetic_vocab(int n_vocab, std::vector<std::string>& tokens, std::vector<float>& scores,
                     std::vector<int32_t>& types) {
  const std::string space = "\xE2\x96\x81";  // "▁"
  tokens = {"<unk>", "<s>", "</s>"};
  types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(fmt::format("<0x{:02X}>", b));
    types.push_back(6);
  }
  scores.assign(tokens.size(), 0.0f);
  auto add_piece = [&](std::string p) {
    if (static_cast<int>(tokens.size()) >= n_vocab) return false;
    scores.push_back(-static_cast<float>(tokens.size() - 259));
    tokens.push_back(std::move(p));
    types.push_back(1);
    return true;
  };
  if (!add_piece(space)) return;
  // Level L: every L-letter string over a..z, then each with a "▁" prefix.
  for (int len = 1; static_cast<int>(tokens.size()) < n_vocab; ++len) {
    uint64_t count = 1;
    for (int k = 0; k < len; ++k) count *= 26;
    for (int with_space = 0; with_space < 2; ++with_space)
      for (uint64_t i = 0; i < count; ++i) {
        std::string s(static_cast<size_t>(len), 'a');
        uint64_t x = i;
        for (int k = len - 1; k >= 0; --k, x /= 26) s[static_cast<size_t>(k)] = static_cast<char>('a' + x % 26);
        if (!add_piece(with_space ? space + s : s)) return;
      }
  }
}

}  // namespace

RandomModelSpec random_model_preset(const std::string& name) {
  auto shape = [&](int e, int l, int h, int kv, int ff, int v, int ctx) {
    RandomModelSpec s;
    s.name = name;
    s.n_embd = e;
    s.n_layer = l;
    s.n_head = h;
    s.n_head_kv = kv;
    s.n_ff = ff;
    s.n_vocab = v;
    s.n_ctx = ctx;
    return s;
  };
  if (name == "s15m") return shape(288, 6, 6, 6, 768, 32000, 256);
  if (name == "s110m") return shape(768, 12, 12, 12, 2048, 32000, 1024);
  if (name == "gqa") return shape(2048, 4, 32, 4, 5632, 32000, 4096);
  if (name == "tiny") return shape(64, 2, 4, 2, 96, 300, 128);
  // Real models: the config.json fields as convert_hf_to_gguf.py maps them
  // (hidden_size -> embedding_length, num_hidden_layers -> block_count,
  // num_attention_heads / num_key_value_heads -> head_count / head_count_kv,
  // intermediate_size -> feed_forward_length, vocab_size -> token count,
  // max_position_embeddings -> context_length, head_dim (when present) ->
  // key_length / value_length, rope_theta, rms_norm_eps, tie_word_embeddings
  // -> no output.weight, rope_scaling "llama3" -> rope_freqs.weight).
  if (name == "llama-3.2-1b" || name == "llama-3.2-3b") {
    // huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json: hidden_size
    // 2048, num_hidden_layers 16, num_attention_heads 32, num_key_value_heads 8,
    // head_dim 64, intermediate_size 8192; Llama-3.2-3B: 3072, 28, 24, 8, head_dim
    // 128, 8192. Both: vocab_size 128256, max_position_embeddings 131072,
    // rope_theta 500000, rope_scaling {rope_type llama3, factor 32,
    // low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings
    // 8192}, rms_norm_eps 1e-5, tie_word_embeddings true.
    RandomModelSpec s = name == "llama-3.2-1b" ? shape(2048, 16, 32, 8, 8192, 128256, 131072)
                                               : shape(3072, 28, 24, 8, 8192, 128256, 131072);
    s.n_embd_head = s.n_embd / s.n_head;
    s.rope_freq_base = 500000.0f;
    s.llama3 = Llama3RopeScaling{32.0f, 1.0f, 4.0f, 8192};
    s.rms_eps = 1e-5f;
    s.tied_output = true;
    s.hf_model = name == "llama-3.2-1b" ? "meta-llama/Llama-3.2-1B" : "meta-llama/Llama-3.2-3B";
    return s;
  }
  if (name == "qwen2.5-0.5b") {
    // huggingface.co/Qwen/Qwen2.5-0.5B/blob/main/config.json: hidden_size 896,
    // num_hidden_layers 24, num_attention_heads 14, num_key_value_heads 2 (no
    // head_dim: 896 / 14 = 64), intermediate_size 4864, vocab_size 151936,
    // max_position_embeddings 32768, rope_theta 1000000, rms_norm_eps 1e-6,
    // tie_word_embeddings true; Qwen2ForCausalLM has Q/K/V biases.
    RandomModelSpec s = shape(896, 24, 14, 2, 4864, 151936, 32768);
    s.arch = "qwen2";
    s.rope_freq_base = 1000000.0f;
    s.rms_eps = 1e-6f;
    s.tied_output = true;
    s.hf_model = "Qwen/Qwen2.5-0.5B";
    return s;
  }
  throw ArgumentError(fmt::format("unknown model preset '{}' (expected one of: {})", name,
                                  fmt::join(random_model_presets(), ", ")));
}

std::vector<std::string> random_model_presets() {
  return {"s15m", "s110m", "gqa", "tiny", "llama-3.2-1b", "llama-3.2-3b", "qwen2.5-0.5b"};
}

RandomModelSpec random_model_flavour(RandomModelSpec s, const std::string& flavour) {
  if (flavour == "llama") return s;
  if (flavour == "llama3") {  // Llama 3.1/3.2 config.json: rope_theta 500000, rope_scaling llama3 8/1/4/8192
    s.rope_freq_base = 500000.0f;
    s.llama3 = Llama3RopeScaling{8.0f, 1.0f, 4.0f, 8192};
    return s;
  }
  if (flavour == "qwen2" || flavour == "qwen3") {  // Qwen2.5 / Qwen3 config.json: rope_theta 1e6, rms_norm_eps 1e-6
    s.arch = flavour;
    s.rope_freq_base = 1000000.0f;
    s.rms_eps = 1e-6f;
    if (flavour == "qwen3") s.n_embd_head = 128;
    return s;
  }
  if (flavour == "gemma2") {  // google/gemma-2-2b config.json: rope_theta 10000, rms_norm_eps 1e-6, soft-caps 50 / 30,
                              // sliding_window 4096, tie_word_embeddings (llama.cpp never reads output.weight)
    s.arch = flavour;
    s.n_embd_head = s.head_dim();
    s.rms_eps = 1e-6f;
    s.attn_softcap = 50.0f;
    s.final_softcap = 30.0f;
    s.sliding_window = 4096;
    s.tied_output = true;
    return s;
  }
  if (flavour == "gemma3") {  // google/gemma-3-1b-pt config.json: rope_theta 1e6, rope_local_base_freq 10000,
                              // rms_norm_eps 1e-6, sliding_window 512, no soft-caps, tie_word_embeddings
    s.arch = flavour;
    s.n_embd_head = s.head_dim();
    s.rope_freq_base = 1000000.0f;
    s.rope_freq_base_swa = 10000.0f;
    s.rms_eps = 1e-6f;
    s.sliding_window = 512;
    s.tied_output = true;
    return s;
  }
  if (flavour == "granite") {  // ibm-granite/granite-3.0-2b-base config.json: embedding_multiplier 12,
                               // residual_multiplier 0.22, attention_multiplier 0.015625, logits_scaling 8,
                               // rope_theta 10000, rms_norm_eps 1e-5, tie_word_embeddings
    s.arch = flavour;
    s.embedding_scale = 12.0f;
    s.residual_scale = 0.22f;
    s.attention_scale = 0.015625f;
    s.logit_scale = 8.0f;
    s.tied_output = true;
    return s;
  }
  if (flavour == "phi3") {  // microsoft/Phi-4-mini-instruct config.json: partial_rotary_factor 0.75, rope_theta
                            // 10000, rms_norm_eps 1e-5, rope_scaling longrope, tie_word_embeddings, no
                            // sliding window; the attention factor of Phi-3.5-mini (131072 / 4096 positions)
    s.arch = flavour;
    s.n_rot = static_cast<int>(0.75 * s.n_embd) / s.n_head;  // the converter's int(rot_pct * n_embd) // n_head
    s.n_rot -= s.n_rot % 2;
    s.longrope.original_context = std::max(1, s.n_ctx / 4);
    s.longrope.attn_factor = static_cast<float>(std::sqrt(1.0 + std::log(32.0) / std::log(4096.0)));
    s.tied_output = true;
    return s;
  }
  throw ArgumentError(fmt::format("unknown architecture flavour '{}' (expected one of: {})", flavour,
                                  fmt::join(random_model_flavours(), ", ")));
}

std::vector<std::string> random_model_flavours() {
  return {"llama", "llama3", "qwen2", "qwen3", "gemma2", "gemma3", "granite", "phi3"};
}

std::vector<float> longrope_factors(bool long_set, int n_rot) {
  std::vector<float> out;
  for (int i = 0; i < n_rot / 2; ++i) out.push_back(long_set ? 1.0f + 2.0f * static_cast<float>(i) : 1.0f + 0.1f * static_cast<float>(i));
  return out;
}

std::vector<float> llama3_rope_factors(const Llama3RopeScaling& s, float freq_base, int n_rot) {
  const double old_ctx = s.original_context, low = s.low_freq_factor, high = s.high_freq_factor;
  const double low_wavelen = old_ctx / low, high_wavelen = old_ctx / high;
  std::vector<float> out;
  for (int i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(static_cast<double>(freq_base), -2.0 * i / n_rot);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = s.factor;
    } else {
      const double smooth = (old_ctx / wavelen - low) / (high - low);
      f = 1.0 / ((1.0 - smooth) / s.factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

int random_model_vocab_size(const std::string& vocab_path) {
  gguf::File f(vocab_path);
  const gguf::Value* v = f.find("tokenizer.ggml.tokens");
  if (!v || v->type != gguf::ValueType::ARRAY)
    throw FormatError(fmt::format("{}: no tokenizer.ggml.tokens array: not a vocabulary file", vocab_path));
  const auto n = std::get<std::vector<gguf::Value>>(v->data).size();
  if (n == 0 || n > static_cast<size_t>(INT32_MAX))
    throw FormatError(fmt::format("{}: tokenizer.ggml.tokens has {} tokens", vocab_path, n));
  return static_cast<int>(n);
}

namespace {

const arch::Description& check_spec(const RandomModelSpec& s) {
  auto bad = [&](const std::string& what) {
    throw ArgumentError(fmt::format("model spec '{}': {}", s.name, what));
  };
  const arch::Description* d = arch::find(s.arch);
  if (!d) bad(fmt::format("unknown architecture '{}' (expected one of: {})", s.arch, arch::names()));
  if (s.n_embd < 1 || s.n_layer < 1 || s.n_head < 1 || s.n_head_kv < 1 || s.n_ff < 1 || s.n_ctx < 1 || s.n_embd_head < 0)
    bad("every size must be >= 1");
  if (s.n_embd_head == 0 && s.n_embd % s.n_head != 0)
    bad(fmt::format("n_embd {} is not a multiple of n_head {}", s.n_embd, s.n_head));
  if (s.n_head % s.n_head_kv != 0)
    bad(fmt::format("n_head {} is not a multiple of n_head_kv {}", s.n_head, s.n_head_kv));
  if (s.head_dim() % 2 != 0) bad(fmt::format("head_dim {} is odd (RoPE rotates pairs)", s.head_dim()));
  if (s.n_rot < 0 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim() || (s.n_rot > 0 && d->full_rotary && s.n_rot != s.head_dim()))
    bad(fmt::format("n_rot {} must be even, at most head_dim {} (equal for architecture '{}')", s.n_rot, s.head_dim(),
                    s.arch));
  if (s.longrope.original_context < 0 || (s.longrope.original_context > 0 && d->longrope == arch::Presence::Absent))
    bad(fmt::format("architecture '{}' has no LongRoPE factors", s.arch));
  if (!(s.longrope.attn_factor > 0 && s.longrope.attn_factor <= 16)) bad("the LongRoPE attention factor must be in (0, 16]");
  if (s.vocab.empty() && s.n_vocab < 260)
    bad(fmt::format("n_vocab {} < 260 (3 specials + 256 byte tokens + 1 piece)", s.n_vocab));
  if (s.n_vocab < 1) bad("n_vocab must be >= 1");
  if (s.llama3.factor > 0 && d->rope_freqs == arch::Presence::Absent)
    bad(fmt::format("architecture '{}' has no rope_freqs tensor (llama3 rope scaling)", s.arch));
  if (s.llama3.factor < 0 || s.rope_linear_factor < 0) bad("rope scaling factors must be >= 0");
  if (s.llama3.factor > 0 && !(s.llama3.high_freq_factor > s.llama3.low_freq_factor))
    bad("llama3 rope scaling needs high_freq_factor > low_freq_factor");
  if (!(s.rope_freq_base > 0) || !(s.rms_eps > 0)) bad("rope_freq_base and rms_eps must be positive");
  if (s.rope_freq_base_swa < 0) bad("rope_freq_base_swa must be >= 0");
  if (!s.tied_output && d->output == arch::Presence::Absent)
    bad(fmt::format("architecture '{}' has no output.weight (the output is token_embd)", s.arch));
  if (s.attn_softcap < 0 || s.final_softcap < 0 || s.sliding_window < 0) bad("soft-caps and the window must be >= 0");
  auto keyed = [](const arch::Param& p) { return !p.key.empty(); };
  if ((s.attn_softcap > 0 && !keyed(d->attn_softcap)) || (s.final_softcap > 0 && !keyed(d->final_softcap)) ||
      (s.sliding_window > 0 && !keyed(d->sliding_window)) || (s.rope_freq_base_swa > 0 && !keyed(d->rope_base_swa)))
    bad(fmt::format("architecture '{}' reads no soft-cap or sliding window key that the spec sets", s.arch));
  if (s.embedding_scale < 0 || s.residual_scale < 0 || s.attention_scale < 0 || s.logit_scale < 0)
    bad("the scales must be >= 0");
  if ((s.embedding_scale > 0 && !keyed(d->embd_scale)) || (s.residual_scale > 0 && !keyed(d->residual_scale)) ||
      (s.attention_scale > 0 && !keyed(d->attn_scale)) || (s.logit_scale > 0 && !keyed(d->logit_scale)))
    bad(fmt::format("architecture '{}' reads no scale key that the spec sets", s.arch));
  if (d->logit_scale.required && !(s.logit_scale > 0))
    bad(fmt::format("architecture '{}' needs a logit scale", s.arch));
  return *d;
}

enum class Fill { Matrix, Ones, QkNorm, Bias, RopeFreqs, RopeLong, RopeShort };

struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  Fill fill;
};

std::vector<TensorSpec> tensor_specs(const RandomModelSpec& s, const arch::Description& d) {
  const uint64_t e = static_cast<uint64_t>(s.n_embd), v = static_cast<uint64_t>(s.n_vocab),
                 f = static_cast<uint64_t>(s.n_ff), hd = static_cast<uint64_t>(s.head_dim()),
                 q = static_cast<uint64_t>(s.n_head) * hd, kv = static_cast<uint64_t>(s.n_head_kv) * hd;
  // The base tensors come first, in the order (and so with the RNG keys) of
  // the original llama writer; extras follow.
  std::vector<TensorSpec> t = {{std::string(arch::kTokenEmbd), {e, v}, Fill::Matrix},
                               {std::string(arch::kOutputNorm), {e}, Fill::Ones}};
  if (!s.tied_output) t.push_back({std::string(arch::kOutput), {e, v}, Fill::Matrix});
  for (int l = 0; l < s.n_layer; ++l) {  // the block as the recipe lays it out (fused or separate projections)
    auto n = [&](const char* base) { return arch::blk_tensor(l, base); };
    t.push_back({n("attn_norm"), {e}, Fill::Ones});
    if (d.fused_qkv) {
      t.push_back({n("attn_qkv"), {e, q + 2 * kv}, Fill::Matrix});
    } else {
      t.push_back({n("attn_q"), {e, q}, Fill::Matrix});
      t.push_back({n("attn_k"), {e, kv}, Fill::Matrix});
      t.push_back({n("attn_v"), {e, kv}, Fill::Matrix});
    }
    t.push_back({n("attn_output"), {q, e}, Fill::Matrix});
    t.push_back({n("ffn_norm"), {e}, Fill::Ones});
    if (d.fused_gate_up) {
      t.push_back({n("ffn_up"), {e, 2 * f}, Fill::Matrix});
    } else {
      t.push_back({n("ffn_gate"), {e, f}, Fill::Matrix});
      t.push_back({n("ffn_up"), {e, f}, Fill::Matrix});
    }
    t.push_back({n("ffn_down"), {f, e}, Fill::Matrix});
  }
  if (s.llama3.factor > 0) t.push_back({std::string(arch::kRopeFreqs), {hd / 2}, Fill::RopeFreqs});
  if (s.longrope.original_context > 0) {
    const uint64_t half = static_cast<uint64_t>(s.rot_dims() / 2);
    t.push_back({std::string(arch::kRopeFactorsLong), {half}, Fill::RopeLong});
    t.push_back({std::string(arch::kRopeFactorsShort), {half}, Fill::RopeShort});
  }
  auto wanted = [&](arch::Presence p) {
    return p == arch::Presence::Required || (p == arch::Presence::Optional && s.optional_tensors);
  };
  for (int l = 0; l < s.n_layer; ++l) {
    auto b = [&](const char* base) { return arch::blk_tensor(l, base, "bias"); };
    if (wanted(d.qkv_bias) && d.fused_qkv) {
      t.push_back({b("attn_qkv"), {q + 2 * kv}, Fill::Bias});
    } else if (wanted(d.qkv_bias)) {
      t.push_back({b("attn_q"), {q}, Fill::Bias});
      t.push_back({b("attn_k"), {kv}, Fill::Bias});
      t.push_back({b("attn_v"), {kv}, Fill::Bias});
    }
    if (wanted(d.out_bias)) t.push_back({b("attn_output"), {e}, Fill::Bias});
    if (wanted(d.ffn_bias)) {
      if (d.fused_gate_up) {
        t.push_back({b("ffn_up"), {2 * f}, Fill::Bias});
      } else {
        t.push_back({b("ffn_gate"), {f}, Fill::Bias});
        t.push_back({b("ffn_up"), {f}, Fill::Bias});
      }
      t.push_back({b("ffn_down"), {e}, Fill::Bias});
    }
    if (wanted(d.qk_norm)) {
      t.push_back({arch::blk_tensor(l, "attn_q_norm"), {hd}, Fill::QkNorm});
      t.push_back({arch::blk_tensor(l, "attn_k_norm"), {hd}, Fill::QkNorm});
    }
    if (d.norm == arch::NormPlacement::PreAndPost) {
      t.push_back({arch::blk_tensor(l, "post_attention_norm"), {e}, Fill::Ones});
      t.push_back({arch::blk_tensor(l, "post_ffw_norm"), {e}, Fill::Ones});
    }
  }
  return t;
}

}  // namespace

uint64_t random_model_parameters(const RandomModelSpec& spec) {
  const arch::Description& d = check_spec(spec);
  uint64_t n = 0;
  for (const auto& t : tensor_specs(spec, d)) {
    uint64_t k = 1;
    for (uint64_t x : t.dims) k *= x;
    n += k;
  }
  return n;
}

namespace {

/// general.* and the {arch}.* hyper-parameters of `spec`.
void add_hparams(gguf::Writer& w, const RandomModelSpec& spec) {
  const std::string a = spec.arch;
  auto key = [&](const char* k) { return a + "." + k; };
  w.add_string("general.architecture", a);
  w.add_string("general.name", "random-" + spec.name);
  w.add_uint32("general.alignment", 32);
  w.add_uint32(key("context_length"), static_cast<uint32_t>(spec.n_ctx));
  w.add_uint32(key("embedding_length"), static_cast<uint32_t>(spec.n_embd));
  w.add_uint32(key("block_count"), static_cast<uint32_t>(spec.n_layer));
  w.add_uint32(key("feed_forward_length"), static_cast<uint32_t>(spec.n_ff));
  w.add_uint32(key("attention.head_count"), static_cast<uint32_t>(spec.n_head));
  w.add_uint32(key("attention.head_count_kv"), static_cast<uint32_t>(spec.n_head_kv));
  if (spec.n_embd_head > 0) {
    w.add_uint32(key("attention.key_length"), static_cast<uint32_t>(spec.n_embd_head));
    w.add_uint32(key("attention.value_length"), static_cast<uint32_t>(spec.n_embd_head));
  }
  w.add_uint32(key("rope.dimension_count"), static_cast<uint32_t>(spec.rot_dims()));
  w.add_float32(key("rope.freq_base"), spec.rope_freq_base);
  w.add_float32(key("attention.layer_norm_rms_epsilon"), spec.rms_eps);
  if (spec.rope_linear_factor > 0) {
    w.add_string(key("rope.scaling.type"), "linear");
    w.add_float32(key("rope.scaling.factor"), spec.rope_linear_factor);
  }
  if (spec.attn_softcap > 0) w.add_float32(key("attn_logit_softcapping"), spec.attn_softcap);
  if (spec.final_softcap > 0) w.add_float32(key("final_logit_softcapping"), spec.final_softcap);
  if (spec.sliding_window > 0) w.add_uint32(key("attention.sliding_window"), static_cast<uint32_t>(spec.sliding_window));
  if (spec.rope_freq_base_swa > 0) w.add_float32(key("rope.freq_base_swa"), spec.rope_freq_base_swa);
  if (spec.embedding_scale > 0) w.add_float32(key("embedding_scale"), spec.embedding_scale);
  if (spec.residual_scale > 0) w.add_float32(key("residual_scale"), spec.residual_scale);
  if (spec.attention_scale > 0) w.add_float32(key("attention.scale"), spec.attention_scale);
  if (spec.logit_scale > 0) w.add_float32(key("logit_scale"), spec.logit_scale);
  if (spec.longrope.original_context > 0) {
    w.add_uint32(key("rope.scaling.original_context_length"), static_cast<uint32_t>(spec.longrope.original_context));
    w.add_float32(key("rope.scaling.attn_factor"), spec.longrope.attn_factor);
  }
}

/// `v`, the value of tokenizer key `key` in vocabulary file `path` of `n` tokens, with
/// its per-token arrays padded to `n_vocab` entries as convert_hf_to_gguf.py
/// pads a tokenizer shorter than config.json's vocab_size
/// (TextModel.get_vocab_base: "[PAD<id>]" tokens of type UNUSED; the
/// SentencePiece path also gives them score -1000). Other keys unchanged.
gguf::Value padded_vocab_value(const std::string& path, const std::string& key, gguf::Value v, int n, int n_vocab) {
  const bool tokens = key == "tokenizer.ggml.tokens", types = key == "tokenizer.ggml.token_type",
             scores = key == "tokenizer.ggml.scores";
  if (n_vocab == n || !(tokens || types || scores) || v.type != gguf::ValueType::ARRAY) return v;
  auto& items = std::get<std::vector<gguf::Value>>(v.data);
  if (items.size() != static_cast<size_t>(n) || items.empty())
    throw FormatError(fmt::format("{}: {} has {} entries for {} tokens", path, key, items.size(), n));
  const gguf::Value like = items.back();
  for (int id = n; id < n_vocab; ++id) {
    gguf::Value x = like;
    if (tokens)
      x.data = fmt::format("[PAD{}]", id);
    else if (scores)
      x.data = -1000.0;
    else if (std::holds_alternative<int64_t>(x.data))
      x.data = int64_t{5};  // llama_token_type LLAMA_TOKEN_TYPE_UNUSED
    else
      x.data = uint64_t{5};
    items.push_back(std::move(x));
  }
  return v;
}

/// The tokenizer.* keys: spec.vocab's (padded to n_vocab), or the synthetic vocabulary.
void add_vocab(gguf::Writer& w, const RandomModelSpec& spec) {
  if (!spec.vocab.empty()) {
    const int n = random_model_vocab_size(spec.vocab);
    if (n > spec.n_vocab)
      throw ArgumentError(fmt::format("model spec '{}': n_vocab {} but {} has {} tokens", spec.name, spec.n_vocab,
                                      spec.vocab, n));
    gguf::File vf(spec.vocab);
    for (const auto& [k, v] : vf.metadata())
      if (k.starts_with("tokenizer.")) w.add(k, padded_vocab_value(spec.vocab, k, v, n, spec.n_vocab));
    return;
  }
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  synthetic_vocab(spec.n_vocab, tokens, scores, types);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_float32_array("tokenizer.ggml.scores", scores);
  w.add_int32_array("tokenizer.ggml.token_type", types);
  w.add_uint32("tokenizer.ggml.bos_token_id", 1);
  w.add_uint32("tokenizer.ggml.eos_token_id", 2);
  w.add_uint32("tokenizer.ggml.unknown_token_id", 0);
  w.add_bool("tokenizer.ggml.add_space_prefix", true);
}

/// Tensor `t` (index `ti` of tensor_specs) filled from the seed's stream: matrices as `type` (or
/// spec.matrix_types' override), every other tensor F32.
void add_random_tensor(gguf::Writer& w, const RandomModelSpec& spec, const TensorSpec& t, size_t ti, uint64_t seed,
                       gguf::TensorType type) {
  switch (t.fill) {
    case Fill::Ones:
      // Norm vectors stay F32 whatever `type` is, as llama.cpp's converters
      // write them (conversion/base.py: "n_dims <= 1 or *_norm.weight" ->
      // F32) and its quantizer keeps them; its CPU backend multiplies F32
      // activations only by F32 vectors (ggml-cpu/binary-ops.cpp) and aborts
      // on an F16 norm.
      w.add_tensor(t.name, t.dims, [](uint64_t, std::span<float> out) { std::fill(out.begin(), out.end(), 1.0f); },
                   gguf::TensorType::F32);
      return;
    case Fill::RopeFreqs:
      w.add_tensor(t.name, t.dims, llama3_rope_factors(spec.llama3, spec.rope_freq_base, spec.head_dim()),
                   gguf::TensorType::F32);
      return;
    case Fill::RopeLong:
    case Fill::RopeShort:
      w.add_tensor(t.name, t.dims, longrope_factors(t.fill == Fill::RopeLong, spec.rot_dims()), gguf::TensorType::F32);
      return;
    default:
      break;
  }
  // Uniform on [-a, a): u is an integer in [-2^23, 2^23), exact in float;
  // one multiply by a float scale (and for Q/K norms one add), so the
  // result is the same under any FP contraction. Matrices: a = sqrt(3 / n_in),
  // variance a^2/3 = 1/n_in.
  const double amp = t.fill == Fill::Matrix ? std::sqrt(3.0 / static_cast<double>(t.dims[0])) : 0.5;
  const float scale = static_cast<float>(amp / 8388608.0);
  const float offset = t.fill == Fill::QkNorm ? 1.0f : 0.0f;
  const uint64_t key_t = mix64(seed + kGolden * (ti + 1)) ^ mix64(~seed);
  w.add_tensor(
      t.name, t.dims,
      [key_t, scale, offset](uint64_t first, std::span<float> out) {
        const int64_t n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static)
        for (int64_t j = 0; j < n; ++j) {
          const uint64_t r = mix64(key_t + kGolden * (first + static_cast<uint64_t>(j) + 1));
          const int32_t u = static_cast<int32_t>(r >> 40) - (1 << 23);
          const float x = static_cast<float>(u) * scale;
          out[static_cast<size_t>(j)] = offset == 0.0f ? x : x + offset;
        }
      },
      t.fill != Fill::Matrix ? gguf::TensorType::F32
                             : (spec.matrix_types.contains(t.name) ? spec.matrix_types.at(t.name) : type));
}

}  // namespace

uint64_t write_random_model(const std::string& path, const RandomModelSpec& spec, uint64_t seed,
                            gguf::TensorType type) {
  return random_model_writer(spec, seed, type).write(path);
}

gguf::Writer random_model_writer(const RandomModelSpec& spec, uint64_t seed, gguf::TensorType type) {
  const arch::Description& d = check_spec(spec);
  gguf::Writer w;
  add_hparams(w, spec);
  add_vocab(w, spec);
  const auto specs = tensor_specs(spec, d);
  for (size_t ti = 0; ti < specs.size(); ++ti) add_random_tensor(w, spec, specs[ti], ti, seed, type);
  return w;
}

}  // namespace kveval
