// The transformer, its KV cache and generation on the real model, against the
// independent reference values in stories260K.json.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gguf_copy.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using kveval::test::real_context;
using namespace kveval;

namespace {

/// Agreement with the reference values (nats): the measured worst error is
/// 3.9e-6 (a rolling token), 1.5e-6 (a loglikelihood sum); 2e-5 leaves a 5x margin.
constexpr double kRefTol = 2e-5;

std::vector<int32_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int32_t>>(); }

// Full cache-free log-probs of tokens[from..] given everything before.
ScoreResult full_score(Context& m, const std::vector<int32_t>& tokens, int from) {
  ScoreRequest r{tokens, from};
  return score(m, std::span<const ScoreRequest>(&r, 1), 1)[0];
}

}  // namespace

TEST_SUITE("model.model") {
  TEST_CASE("hyper-parameters of stories260K" * kveval::test::needs_model()) {
    const auto& hp = real_context().model().hparams();
    CHECK(hp.n_embd == 64);
    CHECK(hp.n_layer == 5);
    CHECK(hp.n_head == 8);
    CHECK(hp.n_head_kv == 4);
    CHECK(hp.n_ff == 172);
    CHECK(hp.n_vocab == 512);
    CHECK(hp.n_ctx_train == 2048);
    CHECK(hp.head_dim() == 8);
    CHECK_FALSE(hp.tied_output);  // ggml-org's conversion stores output.weight explicitly
  }

  TEST_CASE("tied output (no output.weight) equals an explicit copy of token_embd" * kveval::test::needs_model()) {
    gguf::File src(test::model_path());
    const test::ScratchDir dir("tied");
    auto write = [&](bool tied) {
      gguf::Writer w;
      for (const auto& [k, v] : src.metadata())
        if (k != "general.alignment") w.add(k, v);
      for (const auto& t : src.tensors()) {
        if (t.name == "output.weight") continue;
        w.add_tensor(t.name, t.dims, src.tensor_f32(t.name, t.dims));
      }
      const auto& te = src.tensor("token_embd.weight");
      if (!tied) w.add_tensor("output.weight", te.dims, src.tensor_f32(te.name, te.dims));
      auto path = dir.file(tied ? "tied.gguf" : "untied.gguf");
      w.write(path);
      return path;
    };
    auto tied = test::load_context(write(true), {.threads = 1});
    auto untied = test::load_context(write(false), {.threads = 1});
    CHECK(tied->model().hparams().tied_output);
    CHECK_FALSE(untied->model().hparams().tied_output);
    std::vector<int32_t> t = {1, 403, 407, 261, 378};
    std::vector<int> n = {5};
    std::vector<float> a(5 * 512), b(5 * 512);
    tied->forward(t, 1, 5, n, Context::Logits::All, a);
    untied->forward(t, 1, 5, n, Context::Logits::All, b);
    CHECK(a == b);
    CHECK(tied->model().weight_bytes() + 512 * 64 * 4 == untied->model().weight_bytes());
  }

  TEST_CASE("greedy generation reproduces the reference ids and text" * kveval::test::needs_model()) {
    Context& m = real_context();
    for (const auto& g : test::reference_cases("greedy")) {
      const std::string prompt = g["prompt"];
      CAPTURE(prompt);
      auto p = m.model().tokenizer().encode(prompt, true);
      GenerateOptions o;
      o.max_gen_toks = {g["max_gen_toks"].get<int>()};
      o.stop_at_eos = false;
      KvCacheScope scope(m, 1, 512);
      auto gen = generate_greedy(m, {p}, o);
      CHECK(gen[0].ids == ids_of(g["ids"]));
      CHECK(gen[0].reason == StopReason::MaxTokens);
      CHECK(m.model().tokenizer().decode(gen[0].ids) == g["text"].get<std::string>());
    }
    CHECK_FALSE(m.caches_are_setup());
  }

  TEST_CASE("loglikelihood cases match the reference within 2e-5" * kveval::test::needs_model()) {
    Context& m = real_context();
    for (const auto& c : test::reference_cases("loglikelihood")) {
      const std::string ctx = c["context"], cont = c["continuation"];
      CAPTURE(ctx); CAPTURE(cont);
      auto ctx_ids = m.model().tokenizer().encode(ctx, true);
      auto whole = m.model().tokenizer().encode(ctx + cont, true);
      CHECK(static_cast<int>(ctx_ids.size()) == c["n_context_tokens"].get<int>());
      CHECK(static_cast<int>(whole.size() - ctx_ids.size()) == c["n_continuation_tokens"].get<int>());
      auto r = full_score(m, whole, static_cast<int>(ctx_ids.size()));
      CHECK(std::abs(r.sum() - c["logprob"].get<double>()) < kRefTol);
      CHECK(r.all_greedy() == c["is_greedy"].get<bool>());
    }
  }

  TEST_CASE("rolling log-probs match the reference token by token within 2e-5" * kveval::test::needs_model()) {
    Context& m = real_context();
    for (const auto& c : test::reference_cases("rolling")) {
      auto ids = m.model().tokenizer().encode(c["text"].get<std::string>(), true);
      auto r = full_score(m, ids, 1);
      auto want = c["token_logprobs"].get<std::vector<double>>();
      REQUIRE(r.logprobs.size() == want.size());
      CHECK(static_cast<int>(r.logprobs.size()) == c["n_tokens_scored"].get<int>());
      double worst = 0;
      for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(r.logprobs[i] - want[i]));
      CHECK(worst < kRefTol);
      CHECK(std::abs(r.sum() - c["sum_logprob"].get<double>()) < kRefTol);
    }
  }

  TEST_CASE("batched, padded scoring equals one-by-one scoring" * kveval::test::needs_model()) {
    Context& m = real_context();
    std::vector<ScoreRequest> reqs;
    for (const char* s : {"Once upon a time", "Lily and Tom went to the park.", "a", "The sun was hot and bright.",
                          "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."})
      reqs.push_back({m.model().tokenizer().encode(s, true), 1});
    auto batched = score(m, reqs, 8);
    for (size_t i = 0; i < reqs.size(); ++i) {
      auto one = full_score(m, reqs[i].tokens, 1);
      REQUIRE(one.logprobs.size() == batched[i].logprobs.size());
      // batch-invariant matmuls: bit-identical, not just close
      for (size_t j = 0; j < one.logprobs.size(); ++j) CHECK(one.logprobs[j] == batched[i].logprobs[j]);
    }
  }

  TEST_CASE("cached and uncached generation agree (prompts of 1, 7 and 200 tokens, 32 steps)" * kveval::test::needs_model()) {
    Context& m = real_context();
    auto story = m.model().tokenizer().encode(test::reference_cases("rolling")[0]["text"].get<std::string>(), true);
    std::vector<int32_t> long_prompt;
    while (long_prompt.size() < 200) long_prompt.insert(long_prompt.end(), story.begin() + (long_prompt.empty() ? 0 : 1), story.end());
    long_prompt.resize(200);
    std::vector<std::vector<int32_t>> prompts = {{1}, std::vector<int32_t>(story.begin(), story.begin() + 7), long_prompt};
    GenerateOptions o;
    o.max_gen_toks = {32};
    o.stop_at_eos = false;
    std::vector<Generation> cached;
    {
      KvCacheScope scope(m, 3, 256);
      cached = generate_greedy(m, prompts, o);  // one batch with three prompt lengths
    }
    auto uncached = generate_greedy_uncached(m, prompts, o, 256);
    for (size_t r = 0; r < prompts.size(); ++r) {
      CAPTURE(r);
      REQUIRE(cached[r].ids.size() == 32);
      CHECK(cached[r].ids == uncached[r].ids);
      std::vector<int32_t> all = prompts[r];
      all.insert(all.end(), cached[r].ids.begin(), cached[r].ids.end());
      auto full = full_score(m, all, static_cast<int>(prompts[r].size()));
      double worst = 0;
      for (size_t i = 0; i < 32; ++i) {
        worst = std::max(worst, std::abs(full.logprobs[i] - cached[r].logprobs[i]));
        worst = std::max(worst, std::abs(full.logprobs[i] - uncached[r].logprobs[i]));
      }
      CHECK(worst < kRefTol);  // measured: 0 (bit-identical) with oneDNN 2.6
      CHECK(full.all_greedy());
    }
  }

  TEST_CASE("cache API: state after each call" * kveval::test::needs_model()) {
    Context& m = real_context();
    REQUIRE_FALSE(m.caches_are_setup());
    CHECK(m.bytes() == 0);
    CHECK(m.capacity() == 0);
    CHECK_THROWS_AS(m.set_caches_enabled(true), CacheError);
    m.setup_caches(2, 64);
    CHECK(m.caches_are_setup());
    CHECK(m.caches_are_enabled());
    // K and V: 5 layers x 2 rows x 4 kv heads x 64 positions x 8 dims x 4 bytes x 2
    CHECK(m.bytes() == size_t(5) * 2 * 4 * 64 * 8 * 4 * 2);
    CHECK(m.capacity() == 64);
    CHECK(m.cache_batch_size() == 2);
    std::vector<int32_t> toks = {1, 403, 407, 261, 1, 403, 0, 0};
    std::vector<int> n = {4, 2};
    std::vector<float> logits(2 * 512);
    m.forward(toks, 2, 4, n, Context::Logits::Last, logits);
    CHECK(m.n_past(0) == 4);
    CHECK(m.n_past(1) == 2);
    const size_t bytes = m.bytes();
    m.reset_caches();
    CHECK(m.bytes() == bytes);
    CHECK(m.n_past(0) == 0);
    CHECK(m.n_past(1) == 0);
    CHECK(m.caches_are_enabled());
    m.set_caches_enabled(false);
    CHECK_FALSE(m.caches_are_enabled());
    CHECK(m.caches_are_setup());
    m.delete_caches();
    CHECK_FALSE(m.caches_are_setup());
    CHECK_FALSE(m.caches_are_enabled());
    CHECK(m.bytes() == 0);
    CHECK_THROWS_AS(m.n_past(0), ArgumentError);
  }

  TEST_CASE("two contexts over one model, used in turn, give the logits of each context alone" * kveval::test::needs_model()) {
    const Model& model = real_context().model();
    const size_t V = static_cast<size_t>(model.hparams().n_vocab);
    const std::vector<int32_t> a = {1, 403, 407, 261, 378, 300, 426}, b = {1, 261, 378, 403, 407};
    // Cached: a 3-token prefill, then one token per pass; every pass's last logits, in order.
    struct Run {
      Context ctx;
      KvCacheScope scope;
      const std::vector<int32_t>& ids;
      size_t next = 0;
      std::vector<float> logits;
      Run(const Model& m, const std::vector<int32_t>& t) : ctx(m), scope(ctx, 1, 16), ids(t) {}
      bool step(size_t V) {
        if (next >= ids.size()) return false;
        const int n = next == 0 ? 3 : 1;
        const int nt[] = {n};
        std::vector<float> out(V);
        ctx.forward(std::span<const int32_t>(ids.data() + next, static_cast<size_t>(n)), 1, n, nt,
                    Context::Logits::Last, out);
        logits.insert(logits.end(), out.begin(), out.end());
        next += static_cast<size_t>(n);
        return true;
      }
    };
    auto alone = [&](const std::vector<int32_t>& t) {
      Run r(model, t);
      while (r.step(V)) {
      }
      return r.logits;
    };
    const std::vector<float> want_a = alone(a), want_b = alone(b);
    REQUIRE(want_a.size() == 5 * V);
    REQUIRE(want_b.size() == 3 * V);
    // Interleaved: a step of a, a step of b, and a cache-free score in a third context between them.
    Run ra(model, a), rb(model, b);
    Context scorer(model);
    const ScoreRequest req{a, 1};
    const ScoreResult scored_alone = score(scorer, std::span<const ScoreRequest>(&req, 1), 1)[0];
    bool more = true;
    while (more) {
      more = ra.step(V);
      more = rb.step(V) || more;
      const ScoreResult s = score(scorer, std::span<const ScoreRequest>(&req, 1), 1)[0];
      CHECK(s.logprobs == scored_alone.logprobs);
    }
    CHECK(ra.ctx.n_past(0) == 7);
    CHECK(rb.ctx.n_past(0) == 5);
    CHECK(ra.logits == want_a);  // bit for bit
    CHECK(rb.logits == want_b);
    CHECK(scorer.stats().forward_calls == 7);  // 1 + one per round; the contexts count apart
    CHECK(ra.ctx.stats().forward_calls == 5);
    CHECK_FALSE(scorer.caches_are_setup());
  }

  TEST_CASE("KvCacheScope releases on exit, also through an exception" * kveval::test::needs_model()) {
    Context& m = real_context();
    {
      KvCacheScope s(m, 1, 32);
      CHECK(m.caches_are_setup());
      CHECK(m.caches_are_enabled());
      CHECK_THROWS_AS(KvCacheScope(m, 1, 32), CacheError);  // refuses nested set-up
    }
    CHECK_FALSE(m.caches_are_setup());
    CHECK(m.bytes() == 0);
    try {
      KvCacheScope s(m, 2, 32);
      throw std::runtime_error("boom");
    } catch (const std::runtime_error&) {
    }
    CHECK_FALSE(m.caches_are_setup());
    CHECK_FALSE(m.caches_are_enabled());
    CHECK(m.bytes() == 0);
  }

  TEST_CASE("KvCacheScope with CachePolicy::Reuse keeps the allocation and rewinds" * kveval::test::needs_model()) {
    Context& m = real_context();
    const auto allocs = m.stats().cache_allocations;
    {
      KvCacheScope s(m, 1, 32, CachePolicy::Reuse);
      GenerateOptions o;
      o.max_gen_toks = {3};
      generate_greedy(m, {{1}}, o);
    }
    CHECK(m.caches_are_setup());
    CHECK_FALSE(m.caches_are_enabled());
    CHECK(m.n_past(0) == 0);
    {
      KvCacheScope s(m, 1, 32, CachePolicy::Reuse);
      CHECK(m.caches_are_enabled());
    }
    CHECK(m.stats().cache_allocations == allocs + 1);
    m.delete_caches();
  }

  TEST_CASE("KvCacheDisabled restores state and leaves contents bit-identical; disabled forward never touches the cache" * kveval::test::needs_model()) {
    Context& m = real_context();
    CHECK_THROWS_AS(KvCacheDisabled{m}, CacheError);
    KvCacheScope scope(m, 1, 64);
    GenerateOptions o;
    o.max_gen_toks = {10};
    generate_greedy(m, {{1, 403}}, o);
    const int past = m.n_past(0);
    const size_t n_floats = m.bytes() / 2 / sizeof(float);
    // Snapshot the whole allocation, including positions past n_past.
    std::vector<float> k(m.cache_data(0), m.cache_data(0) + n_floats), v(m.cache_data(1), m.cache_data(1) + n_floats);
    {
      KvCacheDisabled off(m);
      CHECK_FALSE(m.caches_are_enabled());
      auto r = full_score(m, m.model().tokenizer().encode("Lily went to the park and played with a ball.", true), 1);
      CHECK(r.logprobs.size() > 5);
      auto u = generate_greedy_uncached(m, {{1}}, o, 64);
      CHECK(u[0].ids.size() == 10);
    }
    CHECK(m.caches_are_enabled());
    CHECK(m.n_past(0) == past);
    CHECK(std::memcmp(k.data(), m.cache_data(0), n_floats * sizeof(float)) == 0);
    CHECK(std::memcmp(v.data(), m.cache_data(1), n_floats * sizeof(float)) == 0);
  }

  TEST_CASE("capacity: generation stops with 'context full' after exactly the positions left" * kveval::test::needs_model()) {
    Context& m = real_context();
    KvCacheScope scope(m, 1, 512);
    GenerateOptions o;
    o.max_gen_toks = {5000};
    o.stop_at_eos = false;
    auto g = generate_greedy(m, {{1}}, o);
    CHECK(g[0].reason == StopReason::ContextFull);
    CHECK(g[0].ids.size() == 511);
    CHECK(std::string(to_string(g[0].reason)) == "context full");
    CHECK(m.n_past(0) == 511);  // the last token chosen is never written
  }

  TEST_CASE("writing past capacity or beyond the set-up batch raises and leaves the cache intact; extra prompts queue" * kveval::test::needs_model()) {
    Context& m = real_context();
    KvCacheScope scope(m, 1, 4);
    std::vector<float> logits(3 * 512);
    std::vector<int32_t> t3 = {1, 403, 407};
    std::vector<int> n3 = {3};
    m.forward(t3, 1, 3, n3, Context::Logits::Last, logits);
    CHECK(m.n_past(0) == 3);
    std::vector<int32_t> t2 = {261, 378};
    std::vector<int> n2 = {2};
    try {
      m.forward(t2, 1, 2, n2, Context::Logits::Last, logits);
      FAIL("expected CacheError");
    } catch (const CacheError& e) {
      CHECK(std::string(e.what()).find("max_seq_len >= 5") != std::string::npos);
    }
    CHECK(m.n_past(0) == 3);
    std::vector<int32_t> tb = {1, 1};
    std::vector<int> nb = {1, 1};
    CHECK_THROWS_AS(m.forward(tb, 2, 1, nb, Context::Logits::Last, logits), CacheError);
    // more prompts than rows queue for the row (dynamic batching), each stopping when the row is full
    auto two = generate_greedy(m, {{1}, {1}}, GenerateOptions{});
    REQUIRE(two.size() == 2);
    CHECK(two[0].reason == StopReason::ContextFull);
    CHECK(two[0].ids.size() == 3);
    CHECK(two[1].ids == two[0].ids);
    CHECK_THROWS_WITH_AS(m.setup_caches(1, 4096), doctest::Contains("context_length 2048"), ArgumentError);
  }

  TEST_CASE("generation without caches set up is refused with a hint" * kveval::test::needs_model()) {
    Context& m = real_context();
    CHECK_THROWS_WITH_AS(generate_greedy(m, {{1}}, GenerateOptions{}), doctest::Contains("KvCacheScope"), CacheError);
  }

  TEST_CASE("max_gen_toks 0, 1, 2 and 7 give exactly that many tokens; should_stop stops with StopReason::StopString" * kveval::test::needs_model()) {
    Context& m = real_context();
    KvCacheScope scope(m, 4, 64);
    GenerateOptions o;
    o.max_gen_toks = {0, 1, 2, 7};
    auto g = generate_greedy(m, {{1}, {1}, {1}, {1}}, o);
    for (int i = 0; i < 4; ++i) CHECK(g[size_t(i)].ids.size() == size_t(o.max_gen_toks[size_t(i)]));
    GenerateOptions stop;
    stop.max_gen_toks = {50};
    stop.should_stop = [](int, std::span<const int32_t> ids) { return ids.back() == 426; };  // "."
    auto s = generate_greedy(m, {{1}}, stop);
    CHECK(s[0].reason == StopReason::StopString);
    CHECK(s[0].ids.back() == 426);
    // the first "." of the reference greedy ids from BOS alone ends the generation there
    const auto ref = test::reference_cases("greedy")[0];
    REQUIRE(ref["prompt"] == "");
    const auto ids = ids_of(ref["ids"]);
    const auto dot = std::find(ids.begin(), ids.end(), 426);
    REQUIRE(dot != ids.end());
    CHECK(s[0].ids == std::vector<int32_t>(ids.begin(), dot + 1));
  }

  TEST_CASE("a model with a missing required tensor is refused by name" * kveval::test::needs_model()) {
    const test::ScratchDir dir("missing_tensor");
    const std::string path = dir.file("missing_tensor.gguf");
    test::copy_gguf(test::model_path(), path, {}, {"blk.3.ffn_up.weight"});
    CHECK_THROWS_WITH_AS(Model::load(path), doctest::Contains("blk.3.ffn_up.weight"), FormatError);
  }

  TEST_CASE("an unsupported architecture is refused by name" * kveval::test::needs_model()) {
    const test::ScratchDir dir("arch");
    const std::string path = dir.file("arch.gguf");
    test::copy_gguf(test::model_path(), path, {{"general.architecture", gguf::Value{gguf::ValueType::STRING, std::string("mamba")}}});
    CHECK_THROWS_WITH_AS(Model::load(path), doctest::Contains("mamba"), FormatError);
  }
}
