// Random-weight Llama GGUF writer: see random_model.hpp.
#include "model/random_model.hpp"

#include <cmath>

#include <fmt/format.h>

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
  if (name == "s15m") return {"s15m", 288, 6, 6, 6, 768, 32000, 256};
  if (name == "s110m") return {"s110m", 768, 12, 12, 12, 2048, 32000, 1024};
  if (name == "gqa") return {"gqa", 2048, 4, 32, 4, 5632, 32000, 4096};
  if (name == "tiny") return {"tiny", 64, 2, 4, 2, 96, 300, 128};
  throw ArgumentError(fmt::format("unknown model preset '{}' (expected one of: s15m, s110m, gqa, tiny)", name));
}

std::vector<std::string> random_model_presets() { return {"s15m", "s110m", "gqa", "tiny"}; }

static void check_spec(const RandomModelSpec& s) {
  auto bad = [&](const std::string& what) {
    throw ArgumentError(fmt::format("model spec '{}': {}", s.name, what));
  };
  if (s.n_embd < 1 || s.n_layer < 1 || s.n_head < 1 || s.n_head_kv < 1 || s.n_ff < 1 || s.n_ctx < 1)
    bad("every size must be >= 1");
  if (s.n_embd % s.n_head != 0) bad(fmt::format("n_embd {} is not a multiple of n_head {}", s.n_embd, s.n_head));
  if (s.n_head % s.n_head_kv != 0)
    bad(fmt::format("n_head {} is not a multiple of n_head_kv {}", s.n_head, s.n_head_kv));
  if (s.head_dim() % 2 != 0) bad(fmt::format("head_dim {} is odd (RoPE rotates pairs)", s.head_dim()));
  if (s.n_vocab < 260) bad(fmt::format("n_vocab {} < 260 (3 specials + 256 byte tokens + 1 piece)", s.n_vocab));
}

namespace {
struct TensorSpec {
  std::string name;
  std::vector<uint64_t> dims;
  bool norm;
};
std::vector<TensorSpec> tensor_specs(const RandomModelSpec& s) {
  const uint64_t e = static_cast<uint64_t>(s.n_embd), v = static_cast<uint64_t>(s.n_vocab),
                 f = static_cast<uint64_t>(s.n_ff),
                 kv = static_cast<uint64_t>(s.n_head_kv) * static_cast<uint64_t>(s.head_dim());
  std::vector<TensorSpec> t = {{"token_embd.weight", {e, v}, false},
                               {"output_norm.weight", {e}, true},
                               {"output.weight", {e, v}, false}};
  for (int l = 0; l < s.n_layer; ++l) {
    auto n = [&](const char* base) { return fmt::format("blk.{}.{}.weight", l, base); };
    t.push_back({n("attn_norm"), {e}, true});
    t.push_back({n("attn_q"), {e, e}, false});
    t.push_back({n("attn_k"), {e, kv}, false});
    t.push_back({n("attn_v"), {e, kv}, false});
    t.push_back({n("attn_output"), {e, e}, false});
    t.push_back({n("ffn_norm"), {e}, true});
    t.push_back({n("ffn_gate"), {e, f}, false});
    t.push_back({n("ffn_up"), {e, f}, false});
    t.push_back({n("ffn_down"), {f, e}, false});
  }
  return t;
}
}  // namespace

uint64_t random_model_parameters(const RandomModelSpec& spec) {
  check_spec(spec);
  uint64_t n = 0;
  for (const auto& t : tensor_specs(spec)) {
    uint64_t k = 1;
    for (uint64_t d : t.dims) k *= d;
    n += k;
  }
  return n;
}

uint64_t write_random_llama(const std::string& path, const RandomModelSpec& spec, uint64_t seed,
                            gguf::TensorType type) {
  check_spec(spec);
  gguf::Writer w;
  w.add_string("general.architecture", "llama");
  w.add_string("general.name", "random-" + spec.name);
  w.add_uint32("general.alignment", 32);
  w.add_uint32("llama.context_length", static_cast<uint32_t>(spec.n_ctx));
  w.add_uint32("llama.embedding_length", static_cast<uint32_t>(spec.n_embd));
  w.add_uint32("llama.block_count", static_cast<uint32_t>(spec.n_layer));
  w.add_uint32("llama.feed_forward_length", static_cast<uint32_t>(spec.n_ff));
  w.add_uint32("llama.attention.head_count", static_cast<uint32_t>(spec.n_head));
  w.add_uint32("llama.attention.head_count_kv", static_cast<uint32_t>(spec.n_head_kv));
  w.add_uint32("llama.rope.dimension_count", static_cast<uint32_t>(spec.head_dim()));
  w.add_float32("llama.rope.freq_base", 10000.0f);
  w.add_float32("llama.attention.layer_norm_rms_epsilon", 1e-5f);

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

  const auto specs = tensor_specs(spec);
  for (size_t ti = 0; ti < specs.size(); ++ti) {
    const auto& t = specs[ti];
    if (t.norm) {
      // Norm vectors stay F32 whatever `type` is, as llama.cpp's converters
      // write them (conversion/base.py: "n_dims <= 1 or *_norm.weight" ->
      // F32) and its quantizer keeps them; its CPU backend multiplies F32
      // activations only by F32 vectors (ggml-cpu/binary-ops.cpp) and aborts
      // on an F16 norm.
      w.add_tensor(t.name, t.dims, [](uint64_t, std::span<float> out) { std::fill(out.begin(), out.end(), 1.0f); },
                   gguf::TensorType::F32);
      continue;
    }
    // Uniform on [-a, a) with a = sqrt(3 / n_in): variance a^2/3 = 1/n_in.
    // u is an integer in [-2^23, 2^23), exact in float; one multiply by a
    // float scale, so the result is the same under any FP contraction.
    const float scale = static_cast<float>(std::sqrt(3.0 / static_cast<double>(t.dims[0])) / 8388608.0);
    const uint64_t key = mix64(seed + kGolden * (ti + 1)) ^ mix64(~seed);
    w.add_tensor(
        t.name, t.dims,
        [key, scale](uint64_t first, std::span<float> out) {
          const int64_t n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static)
          for (int64_t j = 0; j < n; ++j) {
            const uint64_t r = mix64(key + kGolden * (first + static_cast<uint64_t>(j) + 1));
            const int32_t u = static_cast<int32_t>(r >> 40) - (1 << 23);
            out[static_cast<size_t>(j)] = static_cast<float>(u) * scale;
          }
        },
        type);
  }
  return w.write(path);
}

}  // namespace kveval
