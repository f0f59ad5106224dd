// Architectures (llama with Llama 3.1 / linear rope scaling, qwen2, qwen3):
// random models written by write_random_model, their forward pass (every
// position's logits) against the naive double-precision reference of
// reference_forward.hpp (llama.cpp's / Hugging Face's definitions), cached vs
// uncached greedy generation, and negative controls showing that each feature
// (rope layout, biases, Q/K norms, frequency factors, linear scaling) changes
// the logits by far more than the tolerance (so the comparison can fail).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <filesystem>
#include <functional>
#include <map>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "model/reference_forward.hpp"
#include "model/tokenizer.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using test::Ablation;
using test::ReferenceModel;
namespace fs = std::filesystem;

namespace {

fs::path arch_dir() {
  static const test::ScratchDir dir("arch");
  return dir.path;
}

double max_abs_diff(std::span<const float> a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double w = 0;
  for (size_t i = 0; i < b.size(); ++i) w = std::max(w, std::abs(static_cast<double>(a[i]) - b[i]));
  return w;
}

// ---- the models --------------------------------------------------------------

/// A small shape of `flavour` (random_model_flavour) with the given vocabulary
/// file, or "" for the writer's synthetic SentencePiece vocabulary of 512 pieces.
RandomModelSpec small_spec(const std::string& flavour, const std::string& vocab, int n_embd, int n_head, int n_head_kv,
                           int head_dim) {
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), flavour);
  s.name = "arch-" + flavour;
  s.n_embd = n_embd;
  s.n_head = n_head;
  s.n_head_kv = n_head_kv;
  s.n_embd_head = head_dim == n_embd / n_head ? 0 : head_dim;
  s.n_ff = 3 * n_embd / 2;
  s.n_ctx = 256;
  s.vocab = vocab;
  s.n_vocab = vocab.empty() ? 512 : random_model_vocab_size(vocab);  // empty: the synthetic SentencePiece vocabulary
  return s;
}

std::string write(const RandomModelSpec& s, const std::string& file, uint64_t seed = 11) {
  const std::string p = (arch_dir() / file).string();
  write_random_model(p, s, seed);
  return p;
}

/// Tokens for the tests: BOS, the encoded text, then ids spread over the
/// whole vocabulary (the last rows of token_embd included), `n` in all.
std::vector<int32_t> test_ids(const Context& m, size_t n) {
  std::vector<int32_t> ids = m.model().tokenizer().encode("Once upon a time, Lily found a red ball in the park.", true);
  const int32_t V = m.model().hparams().n_vocab;
  for (int32_t i = 0; ids.size() < n; ++i) ids.push_back(static_cast<int32_t>((7919ll * (i + 1)) % V));
  ids[n - 1] = V - 1;
  ids.resize(n);
  return ids;
}

/// Forward of `ids` (Logits::All) as row 1 of a padded batch of two (row 0
/// holds a shorter sequence), compared with the reference; also row 0.
double forward_error(Context& m, const ReferenceModel& ref, const std::vector<int32_t>& ids) {
  const int T = static_cast<int>(ids.size()), V = m.model().hparams().n_vocab, T0 = T / 2;
  std::vector<int32_t> toks(2 * size_t(T), 0);
  std::copy(ids.begin(), ids.begin() + T0, toks.begin());
  std::copy(ids.begin(), ids.end(), toks.begin() + T);
  std::vector<int> n = {T0, T};
  std::vector<float> logits(2 * size_t(T) * V);
  m.forward(toks, 2, T, n, Context::Logits::All, logits);
  const auto want = ref.flat_logits(ids);
  const double e1 = max_abs_diff(std::span<const float>(logits).subspan(size_t(T) * V), want);
  const std::vector<double> want0(want.begin(), want.begin() + size_t(T0) * V);
  const double e0 = max_abs_diff(std::span<const float>(logits).first(size_t(T0) * V), want0);
  return std::max(e0, e1);
}

/// Greedy ids for 32 steps from three prompts, with a KV cache and without.
void check_cached_equals_uncached(Context& m, const std::vector<int32_t>& ids) {
  std::vector<std::vector<int32_t>> prompts = {{ids[0]},
                                               std::vector<int32_t>(ids.begin(), ids.begin() + 5),
                                               std::vector<int32_t>(ids.begin(), ids.begin() + 20)};
  GenerateOptions o;
  o.max_gen_toks = {32};
  o.stop_at_eos = false;
  std::vector<Generation> cached;
  {
    KvCacheScope scope(m, 3, 64);
    cached = generate_greedy(m, prompts, o);
  }
  const auto uncached = generate_greedy_uncached(m, prompts, o, 64);
  for (size_t r = 0; r < prompts.size(); ++r) {
    CAPTURE(r);
    REQUIRE(cached[r].ids.size() == 32);
    CHECK(cached[r].ids == uncached[r].ids);
    // Random weights still pick more than one token over 32 steps.
    CHECK(std::set<int32_t>(cached[r].ids.begin(), cached[r].ids.end()).size() > 1);
  }
}

/// The negative controls: reference logits with `ab` differ from the engine by more than `min_diff`.
void check_feature_matters(Context& m, const ReferenceModel& ref, const std::vector<int32_t>& ids, const Ablation& ab,
                           const std::string& what, double min_diff = 1e-2) {
  const int T = static_cast<int>(ids.size()), V = m.model().hparams().n_vocab;
  std::vector<float> logits(size_t(T) * V);
  std::vector<int> n = {T};
  m.forward(ids, 1, T, n, Context::Logits::All, logits);
  const double d = max_abs_diff(logits, ref.flat_logits(ids, ab));
  CAPTURE(what);
  CAPTURE(d);
  CHECK(d > min_diff);
}

/// The shared vocabulary file `name`, or "" (with a message) when ../shared is
/// absent. A file kveval cannot read fails the test (no silent skip).
std::string shared_vocab(const std::string& name) {
  const std::string dir = test::shared_dir();
  if (dir.empty()) {
    MESSAGE("skipping: no shared fixtures folder (KVEVAL_SHARED_DIR or <source>/../shared)");
    return "";
  }
  const std::string p = dir + "/tokenizers/" + name;
  if (!fs::exists(p)) {
    MESSAGE("skipping: " << p << " not found");
    return "";
  }
  return p;
}

}  // namespace

TEST_SUITE("model.arch") {
  TEST_CASE("llama with Llama 3.1 rope_freqs factors, GQA, head_dim 32, tied output") {
    RandomModelSpec s = small_spec("llama3", "", 128, 4, 2, 32);
    // A short original context makes the factors bite at test positions:
    // wavelengths 2 pi base^(2i/32) against 32/4 and 32/1 give 1, smooth and 8.
    s.rope_freq_base = 10000.0f;
    s.llama3.original_context = 32;
    s.tied_output = true;
    const std::string p = write(s, "llama3.gguf");
    auto m = test::load_context(p, {.threads = 2});
    const HParams& hp = m->model().hparams();
    CHECK(hp.arch == "llama");
    CHECK(hp.rope_style == arch::RopeStyle::Normal);
    CHECK(hp.rope_freq_factors);
    CHECK(hp.tied_output);
    CHECK(hp.head_dim() == 32);
    const ReferenceModel ref(p);
    const auto f = llama3_rope_factors(s.llama3, s.rope_freq_base, 32);
    CHECK(std::count(f.begin(), f.end(), 1.0f) >= 1);
    CHECK(std::count(f.begin(), f.end(), 8.0f) >= 1);
    const auto ids = test_ids(*m, 40);  // >= 16 queries and head_dim 32: the oneDNN attention path
    const double err = forward_error(*m, ref, ids);
    MESSAGE("llama3 (rope_freqs, GQA 4/2, head_dim 32, tied): max |logit - double reference| = " << err);
    CHECK(err < 1e-4);
    check_feature_matters(*m, ref, ids, {.no_rope_factors = true}, "rope_freqs factors");
    check_feature_matters(*m, ref, ids, {.swap_rope_style = true}, "rope layout");
    check_cached_equals_uncached(*m, ids);
  }

  TEST_CASE("llama with linear rope scaling and every optional bias, untied output") {
    RandomModelSpec s = small_spec("llama", "", 64, 4, 4, 16);
    s.rope_linear_factor = 4.0f;
    s.optional_tensors = true;
    const std::string p = write(s, "llama_linear.gguf");
    auto m = test::load_context(p, {.threads = 2});
    CHECK(m->model().hparams().rope_freq_scale == 0.25f);
    CHECK(m->model().hparams().qkv_bias);
    CHECK_FALSE(m->model().hparams().tied_output);
    const ReferenceModel ref(p);
    const auto ids = test_ids(*m, 24);
    const double err = forward_error(*m, ref, ids);
    MESSAGE("llama (linear x4, all biases): max |logit - double reference| = " << err);
    CHECK(err < 1e-4);
    check_feature_matters(*m, ref, ids, {.no_bias = true}, "biases");
    check_feature_matters(*m, ref, ids, {.no_linear_scale = true}, "linear scaling");
    check_cached_equals_uncached(*m, ids);
  }

  TEST_CASE("qwen2: Q/K/V biases, NEOX rope, GQA") {
    const RandomModelSpec s = small_spec("qwen2", "", 64, 4, 2, 16);
    const std::string p = write(s, "qwen2.gguf");
    auto m = test::load_context(p, {.threads = 2});
    CHECK(m->model().hparams().arch == "qwen2");
    CHECK(m->model().hparams().rope_style == arch::RopeStyle::Neox);
    CHECK(m->model().hparams().qkv_bias);
    CHECK(m->model().hparams().rms_eps == 1e-6f);
    CHECK(m->model().hparams().rope_freq_base == 1e6f);
    const ReferenceModel ref(p);
    const auto ids = test_ids(*m, 24);
    const double err = forward_error(*m, ref, ids);
    MESSAGE("qwen2 (biases, GQA 4/2): max |logit - double reference| = " << err);
    CHECK(err < 1e-4);
    check_feature_matters(*m, ref, ids, {.no_bias = true}, "Q/K/V biases");
    check_feature_matters(*m, ref, ids, {.swap_rope_style = true}, "rope layout");
    check_cached_equals_uncached(*m, ids);
  }

  TEST_CASE("qwen3: Q/K norms, head_dim 32 != n_embd / n_head, tied output") {
    RandomModelSpec s = small_spec("qwen3", "", 64, 4, 2, 32);
    s.tied_output = true;
    const std::string p = write(s, "qwen3.gguf");
    auto m = test::load_context(p, {.threads = 2});
    CHECK(m->model().hparams().head_dim() == 32);
    CHECK(m->model().hparams().n_embd_q() == 128);
    CHECK(m->model().hparams().qk_norm);
    const ReferenceModel ref(p);
    const auto ids = test_ids(*m, 40);
    const double err = forward_error(*m, ref, ids);
    MESSAGE("qwen3 (q/k norm, head_dim 32, GQA 4/2, tied): max |logit - double reference| = " << err);
    CHECK(err < 1e-4);
    check_feature_matters(*m, ref, ids, {.no_qk_norm = true}, "Q/K norms");
    check_feature_matters(*m, ref, ids, {.swap_rope_style = true}, "rope layout");
    check_cached_equals_uncached(*m, ids);
  }

  TEST_CASE("real vocabularies: llama3 with the Llama 3 tokenizer, qwen2 and qwen3 with the Qwen tokenizer, "
            "llama with the Llama 2 / Mistral tokenizer") {
    struct Case {
      const char* flavour;
      const char* vocab;
      int n_head, n_head_kv, head_dim;
      bool tied;
    };
    for (const Case& c : {Case{"llama3", "ggml-vocab-llama-bpe.gguf", 2, 1, 32, false},
                          Case{"qwen2", "ggml-vocab-qwen2.gguf", 4, 2, 16, true},
                          Case{"qwen3", "ggml-vocab-qwen2.gguf", 4, 2, 32, true},
                          Case{"llama", "ggml-vocab-llama-spm.gguf", 4, 4, 16, false}}) {
      const std::string flavour = c.flavour;
      CAPTURE(flavour);
      const std::string vocab = shared_vocab(c.vocab);
      if (vocab.empty()) continue;
      RandomModelSpec s = small_spec(c.flavour, vocab, 64, c.n_head, c.n_head_kv, c.head_dim);
      s.tied_output = c.tied;
      const std::string p = write(s, std::string(c.flavour) + "_real.gguf");
      auto m = test::load_context(p, {.threads = 2});
      CHECK(m->model().hparams().n_vocab >= 32000);
      const ReferenceModel ref(p);
      const auto ids = test_ids(*m, 20);
      const double err = forward_error(*m, ref, ids);
      MESSAGE(flavour << " with " << std::string(c.vocab) << ": max |logit - double reference| = " << err);
      CHECK(err < 1e-4);
      check_cached_equals_uncached(*m, ids);
      fs::remove(p);
    }
  }

  TEST_CASE("llama3 rope factors follow the Llama 3.1 formula (hand-computed)") {
    // base 10000, n_rot 8: frequencies 1, 0.1, 0.01, 0.001; wavelengths 2 pi x
    // (1, 10, 100, 1000). original context 400, low 1, high 4: thresholds 100 and 400.
    const auto f = llama3_rope_factors({8.0f, 1.0f, 4.0f, 400}, 10000.0f, 8);
    REQUIRE(f.size() == 4);
    CHECK(f[0] == 1.0f);  // 6.28 < 100
    CHECK(f[1] == 1.0f);  // 62.8 < 100
    CHECK(f[2] == 8.0f);  // 628.3 > 400
    CHECK(f[3] == 8.0f);
    // a wavelength between the thresholds: original context 2000 (thresholds 500, 2000):
    // pair 2 has w = 628.32, smooth = (2000 / 628.32 - 1) / 3 = 0.72770, factor = 1 / ((1 - s) / 8 + s)
    const auto g = llama3_rope_factors({8.0f, 1.0f, 4.0f, 2000}, 10000.0f, 8);
    CHECK(g[1] == 1.0f);
    CHECK(g[2] == doctest::Approx(1.31279).epsilon(1e-5));
    CHECK(g[3] == 8.0f);
  }
}

namespace {

/// Copies GGUF `src` to `dst` with `edit_keys` applied to the metadata, tensors
/// for which `keep` is false dropped, and `extra` tensors added (F32).
std::string rewrite(const std::string& src, const std::string& dst,
                    const std::function<void(std::vector<std::pair<std::string, gguf::Value>>&)>& edit_keys,
                    const std::function<bool(const std::string&)>& keep = nullptr,
                    const std::map<std::string, std::vector<float>>& extra = {}) {
  gguf::File f(src);
  auto kv = f.metadata();
  edit_keys(kv);
  gguf::Writer w;
  for (const auto& [k, v] : kv)
    if (k != "general.alignment") w.add(k, v);
  for (const auto& t : f.tensors())
    if (!keep || keep(t.name)) w.add_tensor(t.name, t.dims, f.tensor_f32(t.name, t.dims));
  for (const auto& [name, v] : extra) w.add_tensor(name, {v.size()}, v);
  const std::string p = (arch_dir() / dst).string();
  w.write(p);
  return p;
}

void set_key(std::vector<std::pair<std::string, gguf::Value>>& kv, const std::string& key, gguf::Value v) {
  for (auto& [k, old] : kv)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}
gguf::Value str(const std::string& s) { return {gguf::ValueType::STRING, s}; }
gguf::Value u32(uint64_t x) { return {gguf::ValueType::UINT32, x}; }
gguf::Value f32(double x) { return {gguf::ValueType::FLOAT32, x}; }

}  // namespace

TEST_SUITE("model.arch") {
  TEST_CASE("bad architecture files are refused with one line naming the file and key or tensor") {
    RandomModelSpec s = small_spec("qwen2", "", 64, 4, 2, 16);
    const std::string q2 = write(s, "bad_src_qwen2.gguf");
    RandomModelSpec s3 = small_spec("qwen3", "", 64, 4, 2, 32);
    const std::string q3 = write(s3, "bad_src_qwen3.gguf");
    RandomModelSpec sl = small_spec("llama3", "", 64, 4, 2, 16);
    const std::string l3 = write(sl, "bad_src_llama3.gguf");
    auto refused = [](const std::string& p, const std::string& needle) {
      CAPTURE(needle);
      try {
        Model::load(p, {.threads = 1});
        FAIL("expected FormatError");
      } catch (const FormatError& e) {
        const std::string msg = e.what();
        CAPTURE(msg);
        CHECK(msg.find(p) == 0);
        CHECK(msg.find('\n') == std::string::npos);
        CHECK(msg.find(needle) != std::string::npos);
      }
    };
    auto no_edit = [](auto&) {};
    refused(rewrite(q2, "yarn.gguf", [](auto& kv) { set_key(kv, "qwen2.rope.scaling.type", str("yarn")); }),
            "rope scaling type 'yarn' (key 'qwen2.rope.scaling.type') is not supported");
    refused(rewrite(l3, "longrope.gguf", [](auto& kv) { set_key(kv, "llama.rope.scaling.type", str("longrope")); }),
            "'longrope'");
    refused(rewrite(l3, "moe.gguf", [](auto& kv) { set_key(kv, "llama.expert_count", u32(8)); }),
            "mixture of experts (llama.expert_count = 8)");
    refused(rewrite(q2, "nobias.gguf", no_edit, [](const std::string& n) { return n != "blk.1.attn_k.bias"; }),
            "missing tensor 'blk.1.attn_k.bias'");
    refused(rewrite(q3, "extra.gguf", no_edit, nullptr, {{"blk.0.attn_q.bias", std::vector<float>(128, 0.0f)}}),
            "tensor 'blk.0.attn_q.bias' is not used by architecture 'qwen3'");
    refused(rewrite(q2, "freqs_in_qwen2.gguf", no_edit, nullptr, {{"rope_freqs.weight", std::vector<float>(8, 1.0f)}}),
            "tensor 'rope_freqs.weight' is not used by architecture 'qwen2'");
    refused(rewrite(q3, "no_knorm.gguf", no_edit, [](const std::string& n) { return n != "blk.0.attn_k_norm.weight"; }),
            "missing tensor 'blk.0.attn_k_norm.weight'");
    refused(rewrite(q3, "kv_len.gguf", [](auto& kv) { set_key(kv, "qwen3.attention.value_length", u32(16)); }),
            "qwen3.attention.value_length 16");
    refused(rewrite(q3, "no_eps.gguf",
                    [](auto& kv) {
                      std::erase_if(kv, [](const auto& e) { return e.first == "qwen3.attention.layer_norm_rms_epsilon"; });
                    }),
            "missing key 'qwen3.attention.layer_norm_rms_epsilon'");
    refused(rewrite(l3, "n_rot.gguf", [](auto& kv) { set_key(kv, "llama.rope.dimension_count", u32(8)); }),
            "llama.rope.dimension_count 8 must equal the head size 16");
    refused(rewrite(l3, "freqs_neg.gguf", no_edit, [](const std::string& n) { return n != "rope_freqs.weight"; },
                    {{"rope_freqs.weight", {1, 1, 1, 1, 1, 1, -2, 8}}}),
            "tensor 'rope_freqs.weight' element 6 = -2");
    refused(rewrite(l3, "freqs_shape.gguf", no_edit, [](const std::string& n) { return n != "rope_freqs.weight"; },
                    {{"rope_freqs.weight", std::vector<float>(16, 1.0f)}}),
            "tensor 'rope_freqs.weight' has shape [16], expected [8]");
    refused(rewrite(l3, "scale.gguf", [](auto& kv) { set_key(kv, "llama.rope.scaling.factor", f32(-2)); }),
            "key 'llama.rope.scaling.factor' = -2 out of range: 0 (none) or a factor in [0.001, 1000]");
    refused(rewrite(l3, "scale_big.gguf", [](auto& kv) { set_key(kv, "llama.rope.scale_linear", f32(1e6f)); }),
            "key 'llama.rope.scale_linear' = 1000000 out of range");
    refused(rewrite(q2, "base.gguf", [](auto& kv) { set_key(kv, "qwen2.rope.freq_base", f32(0.5f)); }),
            "key 'qwen2.rope.freq_base' = 0.5 out of range (1, 1000000000000]");
    refused(rewrite(q3, "eps0.gguf", [](auto& kv) { set_key(kv, "qwen3.attention.layer_norm_rms_epsilon", f32(0)); }),
            "key 'qwen3.attention.layer_norm_rms_epsilon' = 0 out of range (0, 1]");
    refused(rewrite(q3, "eps2.gguf", [](auto& kv) { set_key(kv, "qwen3.attention.layer_norm_rms_epsilon", f32(2)); }),
            "key 'qwen3.attention.layer_norm_rms_epsilon' = 2 out of range (0, 1]");
    refused(rewrite(q3, "klen.gguf", [](auto& kv) { set_key(kv, "qwen3.attention.key_length", u32(100000)); }),
            "key 'qwen3.attention.key_length' = 100000 out of range [2, 4096]");
    refused(rewrite(l3, "freqs_big.gguf", no_edit, [](const std::string& n) { return n != "rope_freqs.weight"; },
                    {{"rope_freqs.weight", {1, 1, 1, 1, 1, 1, 1, 1e6f}}}),
            "tensor 'rope_freqs.weight' element 7 = 1000000 (frequency factors must be in [0.001, 1000])");
    refused(rewrite(q2, "phi.gguf", [](auto& kv) { set_key(kv, "general.architecture", str("phi2")); }),
            "unsupported architecture 'phi2' (general.architecture); kveval supports llama, qwen2, qwen3, gemma2, gemma3, "
            "granite, phi3");
    refused(rewrite(q2, "nul.gguf", [](auto& kv) { set_key(kv, "general.architecture", str(std::string("lla\0ma\n", 7))); }),
            "unsupported architecture 'lla\\x00ma\\x0a' (general.architecture)");
  }

  TEST_CASE("rope scaling keys as llama.cpp reads them: type none ignores the factor, the old scale_linear key") {
    RandomModelSpec s = small_spec("llama", "", 64, 4, 4, 16);
    s.rope_linear_factor = 2.0f;
    const std::string p = write(s, "scaled.gguf");
    CHECK(Model::load(p, {.threads = 1})->hparams().rope_freq_scale == 0.5f);
    auto none = Model::load(rewrite(p, "none.gguf", [](auto& kv) { set_key(kv, "llama.rope.scaling.type", str("none")); }),
                            {.threads = 1});
    CHECK(none->hparams().rope_freq_scale == 1.0f);
    auto old = Model::load(rewrite(p, "old_key.gguf",
                                   [](auto& kv) {
                                     std::erase_if(kv, [](const auto& e) { return e.first.starts_with("llama.rope.scaling"); });
                                     set_key(kv, "llama.rope.scale_linear", f32(4));
                                   }),
                           {.threads = 1});
    CHECK(old->hparams().rope_freq_scale == 0.25f);
  }
}
