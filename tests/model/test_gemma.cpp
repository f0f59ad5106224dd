// Gemma 2 and Gemma 3 (general.architecture gemma2, gemma3): random models written by
// write_random_model (what `kveval make-model --arch gemma2` writes) against
// the float64 forward of reference_forward.hpp (sqrt(n_embd) embedding scale,
// post-norms, GeGLU, attention and final soft-caps, a sliding window on even
// layers), cache-free and through the KV cache past the window; files that
// break the architecture's rules are refused with one line naming the key or
// tensor; and llama.cpp's greedy ids for such a model with a real vocabulary
// (tests/data/llamacpp_greedy.json, which also holds the granite and phi3 runs) are kveval's. Gemma 3: Q/K norms, 5 of 6
// layers sliding with their own RoPE base and no linear scaling, the global
// layers scaled.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "context_support.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "model/reference_forward.hpp"
#include "test_support.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

#include <nlohmann/json.hpp>

using namespace kveval;

namespace {

/// 3 layers (0 and 2 slide), heads of 32, GQA, window 5; soft-caps small
/// enough to bend the random model's scores and logits.
RandomModelSpec gemma2_spec() {
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "gemma2");
  s.n_embd = 128, s.n_layer = 3, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 192, s.n_vocab = 320;
  s.n_embd_head = 32;
  s.sliding_window = 5;
  s.attn_softcap = 1.5f;
  s.final_softcap = 3.0f;
  return s;
}

const std::string& gemma2_path() { return test::cached_random_model("gemma2", [] { return gemma2_spec(); }, 5); }

using test::log_softmax_rows;
using test::max_diff;
using test::reference_log_probs;
using test::token_ids;

/// gemma2_path() rewritten: `meta` may change or drop ("" value name) keys, `extra` adds tensors.
std::string rewritten(const test::ScratchDir& dir, const std::string& name,
                      const std::function<void(gguf::Writer&, const std::string& key, const gguf::Value&)>& meta,
                      bool add_output = false) {
  gguf::File f(gemma2_path());
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata())
    if (k != "general.alignment") meta(w, k, v);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.dims, f.tensor_f32(t.name, t.dims));
  if (add_output) {
    const auto& te = f.tensor("token_embd.weight");
    w.add_tensor("output.weight", te.dims, f.tensor_f32(te.name, te.dims));
  }
  const std::string path = dir.file(name);
  w.write(path);
  return path;
}

}  // namespace

TEST_SUITE("model.gemma2") {
  TEST_CASE("cache-free log-probs equal the float64 forward within 1e-4; soft-caps and window matter") {
    auto m = test::load_context(gemma2_path(), ModelOptions{.dtype = ComputeDtype::F32});
    const HParams& hp = m.model().hparams();
    CHECK(hp.sliding_window == 5);
    CHECK(hp.attn_softcap == 1.5f);
    CHECK(hp.final_softcap == 3.0f);
    CHECK(hp.tied_output);
    CHECK(m.model().load_summary().sliding.starts_with("sliding window 5 on 2 of 3 layers"));
    const test::ReferenceModel ref(gemma2_path());
    const size_t V = static_cast<size_t>(hp.n_vocab);
    for (int T : {40, 90}) {  // the loop attention and the oneDNN matmul path
      CAPTURE(T);
      const auto ids = token_ids(size_t(T), hp.n_vocab);
      std::vector<float> logits(size_t(T) * V);
      std::vector<int> n = {T};
      m->forward(ids, 1, T, n, Context::Logits::All, logits);
      const auto got = log_softmax_rows(logits.data(), size_t(T), V);
      CHECK(max_diff(got, reference_log_probs(ref, ids)) <= 1e-4);
      CHECK(max_diff(got, reference_log_probs(ref, ids, {.no_softcap = true})) > 1e-2);
      CHECK(max_diff(got, reference_log_probs(ref, ids, {.no_window = true})) > 1e-2);
    }
  }

  TEST_CASE("through the KV cache: a prompt, then one token at a time past the window") {
    auto m = test::load_context(gemma2_path(), ModelOptions{.dtype = ComputeDtype::F32});
    const size_t V = static_cast<size_t>(m.model().hparams().n_vocab);
    const auto ids = token_ids(24, m.model().hparams().n_vocab);
    KvCacheScope scope(*m, 1, 32);
    const int P = 8;
    std::vector<float> logits(size_t(P) * V);
    std::vector<int> n = {P};
    m->forward(std::vector<int32_t>(ids.begin(), ids.begin() + P), 1, P, n, Context::Logits::All, logits);
    std::vector<double> got = log_softmax_rows(logits.data(), size_t(P), V);
    n = {1};
    for (size_t t = P; t < ids.size(); ++t) {
      std::vector<float> step(V);
      m->forward(std::vector<int32_t>{ids[t]}, 1, 1, n, Context::Logits::Last, step);
      const auto lp = log_softmax_rows(step.data(), 1, V);
      got.insert(got.end(), lp.begin(), lp.end());
    }
    CHECK(max_diff(got, reference_log_probs(test::ReferenceModel(gemma2_path()), ids)) <= 1e-4);
  }

  TEST_CASE("bad files: a missing soft-cap, a window of 0, another layer pattern, an output.weight") {
    const test::ScratchDir dir("gemma2_bad");
    auto copy = [](gguf::Writer& w, const std::string& k, const gguf::Value& v) { w.add(k, v); };
    auto refused = [](const std::string& path, const std::string& msg) {
      CAPTURE(path);
      CHECK_THROWS_WITH_AS(Model::load(path, {}), (path + ": " + msg).c_str(), FormatError);
    };
    refused(rewritten(dir, "nocap.gguf",
                      [&](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        if (k != "gemma2.attn_logit_softcapping") copy(w, k, v);
                      }),
            "key 'gemma2.attn_logit_softcapping' (attention logit soft-cap) is missing; architecture 'gemma2' needs it");
    refused(rewritten(dir, "window0.gguf",
                      [&](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        if (k == "gemma2.attention.sliding_window") w.add_uint32(k, 0);
                        else copy(w, k, v);
                      }),
            "sliding window = 0 (key 'gemma2.attention.sliding_window') must be positive for architecture 'gemma2'");
    refused(rewritten(dir, "pattern.gguf",
                      [&](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
                        copy(w, k, v);
                        if (k == "gemma2.attention.sliding_window") w.add_uint32("gemma2.attention.sliding_window_pattern", 3);
                      }),
            "key 'gemma2.attention.sliding_window_pattern' makes layer 1 sliding; kveval supports only architecture "
            "'gemma2''s own pattern");
    const std::string out = rewritten(dir, "output.gguf", copy, true);
    CHECK_THROWS_WITH_AS(Model::load(out, {}), doctest::Contains("tensor 'output.weight' is not used by architecture 'gemma2'"),
                         FormatError);
    // the same pattern written out (2: even layers slide) loads
    const std::string same = rewritten(dir, "same.gguf", [&](gguf::Writer& w, const std::string& k, const gguf::Value& v) {
      copy(w, k, v);
      if (k == "gemma2.attention.sliding_window") w.add_uint32("gemma2.attention.sliding_window_pattern", 2);
    });
    CHECK_NOTHROW(Model::load(same, {}));
  }

  TEST_CASE("greedy ids equal llama.cpp's for every recorded model: gemma past the window, granite, phi3 "
            "(tests/data/llamacpp_greedy.json)") {
    const std::string shared = test::shared_dir();
    if (shared.empty()) {
      MESSAGE("skipping: no shared fixtures folder, so no real vocabularies");
      return;
    }
    std::ifstream in(test::source_dir() + "/tests/data/llamacpp_greedy.json");
    REQUIRE(in);
    const nlohmann::json expect = nlohmann::json::parse(in);
    REQUIRE(expect["runs"].size() >= 1);
    for (const auto& run : expect["runs"]) {
      const std::string vocab = shared + "/tokenizers/" + run["vocab"].get<std::string>();
      REQUIRE_MESSAGE(std::filesystem::exists(vocab), vocab << " is missing from the shared fixtures");
      const RandomModelSpec s = kveval::test::recorded_model_spec(run, vocab);
      const test::ScratchDir dir("llamacpp_greedy");
      const std::string path = dir.file("m.gguf");
      write_random_model(path, s, run["seed"].get<uint64_t>());
      REQUIRE(sha256_file(path) == run["model_sha256"].get<std::string>());
      auto m = test::load_context(path, ModelOptions{.threads = 2, .dtype = ComputeDtype::F32});
      const auto prompt = run["prompt_ids"].get<std::vector<int32_t>>();
      CHECK(m.model().tokenizer().encode(run["prompt"].get<std::string>(), true) == prompt);
      const auto want = run["generated_ids"].get<std::vector<int32_t>>();
      REQUIRE(static_cast<int>(prompt.size() + want.size()) > 2 * s.sliding_window);
      KvCacheScope scope(*m, 1, static_cast<int>(prompt.size() + want.size()));
      GenerateOptions o;
      o.max_gen_toks = {static_cast<int>(want.size())};
      const auto g = generate_greedy(*m, {prompt}, o);
      REQUIRE(g.size() == 1);
      CHECK(g[0].ids == want);
    }
  }
}

namespace {

/// 7 layers (5 is global, the others slide), heads of 32, window 5, global RoPE base 1e6 with linear
/// scaling 4, sliding layers' base 10000 unscaled, a final soft-cap of 3.
RandomModelSpec gemma3_spec() {
  RandomModelSpec s = random_model_flavour(random_model_preset("tiny"), "gemma3");
  s.n_embd = 128, s.n_layer = 7, s.n_head = 4, s.n_head_kv = 2, s.n_ff = 192, s.n_vocab = 320;
  s.n_embd_head = 32;
  s.sliding_window = 5;
  s.rope_linear_factor = 4.0f;
  s.final_softcap = 3.0f;
  return s;
}

const std::string& gemma3_path() { return test::cached_random_model("gemma3", [] { return gemma3_spec(); }, 6); }

}  // namespace

TEST_SUITE("model.gemma3") {
  TEST_CASE("cache-free and cached log-probs equal the float64 forward within 1e-4; window and Q/K norms matter") {
    auto m = test::load_context(gemma3_path(), ModelOptions{.dtype = ComputeDtype::F32});
    const HParams& hp = m.model().hparams();
    CHECK(hp.sliding_window == 5);
    CHECK(hp.attn_softcap == 0.0f);
    CHECK(hp.final_softcap == 3.0f);
    CHECK(hp.rope_freq_base_swa == 10000.0f);
    CHECK(hp.rope_freq_scale_swa == 1.0f);
    CHECK(hp.rope_freq_scale == 0.25f);
    CHECK(m.model().load_summary().sliding ==
          "sliding window 5 on 6 of 7 layers (those read at most 5 cached positions and keep at most 132 per KV "
          "cache row, RoPE base 10000 scale 1)");
    const test::ReferenceModel ref(gemma3_path());
    const size_t V = static_cast<size_t>(hp.n_vocab);
    const int T = 40;
    const auto ids = token_ids(size_t(T), hp.n_vocab);
    std::vector<float> logits(size_t(T) * V);
    std::vector<int> n = {T};
    m->forward(ids, 1, T, n, Context::Logits::All, logits);
    const auto got = log_softmax_rows(logits.data(), size_t(T), V);
    const auto want = reference_log_probs(ref, ids);
    CHECK(max_diff(got, want) <= 1e-4);
    CHECK(max_diff(got, reference_log_probs(ref, ids, {.no_window = true})) > 1e-2);
    CHECK(max_diff(got, reference_log_probs(ref, ids, {.no_qk_norm = true})) > 1e-2);
    // through the KV cache: a prompt of 8, then one token at a time
    KvCacheScope scope(*m, 1, T);
    const int P = 8;
    n = {P};
    m->forward(std::vector<int32_t>(ids.begin(), ids.begin() + P), 1, P, n, Context::Logits::All, logits);
    std::vector<double> cached = log_softmax_rows(logits.data(), size_t(P), V);
    n = {1};
    for (int t = P; t < T; ++t) {
      std::vector<float> step(V);
      m->forward(std::vector<int32_t>{ids[size_t(t)]}, 1, 1, n, Context::Logits::Last, step);
      const auto lp = log_softmax_rows(step.data(), 1, V);
      cached.insert(cached.end(), lp.begin(), lp.end());
    }
    CHECK(max_diff(cached, want) <= 1e-4);
  }

  TEST_CASE("without a window every layer is global with the global RoPE; a missing Q/K norm is refused") {
    const test::ScratchDir dir("gemma3_nowindow");
    RandomModelSpec s = gemma3_spec();
    s.sliding_window = 0;
    s.final_softcap = 0;
    const std::string path = dir.file("g3.gguf");
    write_random_model(path, s, 6);
    auto m = test::load_context(path, ModelOptions{.dtype = ComputeDtype::F32});
    CHECK(m.model().hparams().sliding_window == 0);
    CHECK(m.model().load_summary().sliding.empty());
    const size_t V = static_cast<size_t>(m.model().hparams().n_vocab);
    const auto ids = token_ids(20, m.model().hparams().n_vocab);
    std::vector<float> logits(20 * V);
    std::vector<int> n = {20};
    m->forward(ids, 1, 20, n, Context::Logits::All, logits);
    CHECK(max_diff(log_softmax_rows(logits.data(), 20, V), reference_log_probs(test::ReferenceModel(path), ids)) <= 1e-4);
    gguf::File f(path);
    gguf::Writer w;
    for (const auto& [k, v] : f.metadata())
      if (k != "general.alignment") w.add(k, v);
    for (const auto& t : f.tensors())
      if (t.name != "blk.3.attn_k_norm.weight") w.add_tensor(t.name, t.dims, f.tensor_f32(t.name, t.dims));
    const std::string bad = dir.file("nonorm.gguf");
    w.write(bad);
    CHECK_THROWS_WITH_AS(Model::load(bad, {}), doctest::Contains("blk.3.attn_k_norm.weight"), std::exception);
  }
}

