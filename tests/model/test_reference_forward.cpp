// The whole Llama forward pass against the naive double-precision forward of
// reference_forward.hpp (RMSNorm, adjacent-pair RoPE at absolute positions,
// causal GQA attention with scale 1/sqrt(head_dim), SwiGLU, residuals), on a
// random model whose heads are 32 wide, like real models' (32-128): their
// attention takes the AVX-512 head kernel (decode steps, and blocks of up to 64
// queries without a cached prefix) and the oneDNN batched-matmul path (longer
// blocks, or 16 or more queries after a cached prefix), neither of which the
// real test model (head_dim 8) reaches. Cache-free and cached
// passes, chunked prefill, greedy generation, and the K/V cache contents.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "model/reference_forward.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

/// head_dim 32, GQA (4 query heads share 2 kv heads), 2 layers, 320 tokens.
RandomModelSpec attn_spec() {
  RandomModelSpec s;
  s.name = "attn32";
  s.n_embd = 128;
  s.n_layer = 2;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 192;
  s.n_vocab = 320;
  s.n_ctx = 256;
  return s;
}

const std::string& attn_model_path() {
  static const test::ScratchDir dir("reference_forward");
  static const std::string path = [] {
    const std::string p = dir.file("attn32.gguf");
    write_random_llama(p, attn_spec(), 11);
    return p;
  }();
  return path;
}

Context& attn_context() {
  static std::unique_ptr<Model> m = Model::load(attn_model_path(), {.threads = 2});
  static Context c(*m);
  return c;
}

const test::ReferenceModel& naive() {
  static const test::ReferenceModel n(attn_model_path());
  return n;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> u(3, attn_spec().n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = u(g);
  t[0] = 1;  // BOS
  return t;
}

double log_softmax(const std::vector<double>& l, size_t i) {
  const double mx = *std::max_element(l.begin(), l.end());
  double s = 0;
  for (double v : l) s += std::exp(v - mx);
  return l[i] - mx - std::log(s);
}

/// Logits agree within 2e-5 relative to max(1, |reference|); measured worst
/// error is ~1e-6 (a wrong attention scale or eps moves them by > 1e-3).
constexpr double kTol = 2e-5;

double worst_error(const float* got, const std::vector<double>& want) {
  double w = 0;
  for (size_t i = 0; i < want.size(); ++i) w = std::max(w, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  return w;
}

}  // namespace

TEST_SUITE("model.reference_forward") {
  TEST_CASE("the random model has 32-wide heads, GQA and two layers") {
    const auto& hp = attn_context().model().hparams();
    CHECK(hp.head_dim() == 32);
    CHECK(hp.n_head == 4);
    CHECK(hp.n_head_kv == 2);
    CHECK(hp.n_layer == 2);
    CHECK(naive().n_rot == 32);
  }

  TEST_CASE("cache-free forward equals the naive forward: 9, 20 and 200 tokens, padded rows in one batch") {
    Context& m = attn_context();
    const size_t V = size_t(m.model().hparams().n_vocab);
    // 9 queries take the loop attention, 20 one oneDNN block, 200 two causal blocks (128 + 72)
    const std::vector<std::vector<int32_t>> rows = {random_tokens(200, 1), random_tokens(20, 2), random_tokens(9, 3)};
    const int seq = 200, batch = int(rows.size());
    std::vector<int32_t> tokens(size_t(batch * seq), 0);
    std::vector<int> n(static_cast<size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      std::copy(rows[size_t(r)].begin(), rows[size_t(r)].end(), tokens.begin() + r * seq);
      n[size_t(r)] = int(rows[size_t(r)].size());
    }
    std::vector<float> logits(size_t(batch * seq) * V);
    m.forward(tokens, batch, seq, n, Context::Logits::All, logits);
    for (int r = 0; r < batch; ++r) {
      CAPTURE(r);
      const auto want = naive().logits(rows[size_t(r)]);
      double worst = 0;
      for (size_t t = 0; t < want.size(); ++t)
        worst = std::max(worst, worst_error(logits.data() + (size_t(r * seq) + t) * V, want[t]));
      CHECK(worst < kTol);
    }
  }

  TEST_CASE("cached forward in chunks (20, 37, 1, 16 tokens) equals the naive forward at every position") {
    Context& m = attn_context();
    const size_t V = size_t(m.model().hparams().n_vocab);
    const auto all = random_tokens(74, 4);
    const auto want = naive().logits(all);
    KvCacheScope scope(m, 1, 128);
    size_t at = 0;
    for (int chunk : {20, 37, 1, 16}) {
      CAPTURE(chunk);
      std::vector<int32_t> t(all.begin() + long(at), all.begin() + long(at) + chunk);
      std::vector<int> n = {chunk};
      std::vector<float> logits(size_t(chunk) * V);
      m.forward(t, 1, chunk, n, Context::Logits::All, logits);
      double worst = 0;
      for (int i = 0; i < chunk; ++i) worst = std::max(worst, worst_error(logits.data() + size_t(i) * V, want[at + size_t(i)]));
      CHECK(worst < kTol);
      at += size_t(chunk);
      CHECK(m.n_past(0) == int(at));
    }
  }

  TEST_CASE("cached greedy generation equals uncached generation and the naive forward's log-probs") {
    Context& m = attn_context();
    const std::vector<std::vector<int32_t>> prompts = {random_tokens(40, 5), random_tokens(17, 6)};
    GenerateOptions o;
    o.max_gen_toks = {24};
    o.stop_at_eos = false;
    std::vector<Generation> cached;
    {
      KvCacheScope scope(m, 2, 128);
      cached = generate_greedy(m, prompts, o);
    }
    const auto uncached = generate_greedy_uncached(m, prompts, o, 128);
    for (size_t r = 0; r < prompts.size(); ++r) {
      CAPTURE(r);
      REQUIRE(cached[r].ids.size() == 24);
      CHECK(cached[r].ids == uncached[r].ids);
      std::vector<int32_t> seq = prompts[r];
      seq.insert(seq.end(), cached[r].ids.begin(), cached[r].ids.end());
      const auto want = naive().logits(seq);
      double worst = 0;
      for (size_t i = 0; i < 24; ++i) {
        const auto& l = want[prompts[r].size() - 1 + i];
        const double lp = log_softmax(l, size_t(cached[r].ids[i]));
        worst = std::max({worst, std::abs(cached[r].logprobs[i] - lp), std::abs(uncached[r].logprobs[i] - lp)});
        // greedy: the chosen token is the naive argmax unless two logits are within the tolerance
        const double best = *std::max_element(l.begin(), l.end());
        CHECK(l[size_t(cached[r].ids[i])] > best - 1e-4);
      }
      CHECK(worst < kTol);
    }
  }

  TEST_CASE("the KV cache holds layer-0 keys rotated by their absolute position and values unrotated") {
    // Attention only sees position differences, so a RoPE position shift is
    // invisible in the logits; the cached keys show it.
    Context& m = attn_context();
    const auto& n = naive();
    const auto toks = random_tokens(6, 7);
    KvCacheScope scope(m, 1, 16);
    GenerateOptions o;
    o.max_gen_toks = {2};
    o.stop_at_eos = false;
    const auto g = generate_greedy(m, {std::vector<int32_t>(toks.begin(), toks.begin() + 5)}, o);
    REQUIRE(m.n_past(0) == 6);  // 5 prompt tokens and the first generated one
    const int HD = n.head_dim, cap = m.capacity();
    for (int pos = 0; pos < 6; ++pos) {
      CAPTURE(pos);
      const int32_t tok = pos < 5 ? toks[size_t(pos)] : g[0].ids[0];
      const auto [k, v] = n.layer0_kv(tok, pos);
      double worst_k = 0, worst_v = 0;
      for (int h = 0; h < n.n_head_kv; ++h)
        for (int e = 0; e < HD; ++e) {
          const size_t off = (size_t(h) * size_t(cap) + size_t(pos)) * size_t(HD) + size_t(e);  // layer 0, row 0
          worst_k = std::max(worst_k, std::abs(m.cache_data(0)[off] - k[size_t(h * HD + e)]));
          worst_v = std::max(worst_v, std::abs(m.cache_data(1)[off] - v[size_t(h * HD + e)]));
        }
      CHECK(worst_k < 1e-5);
      CHECK(worst_v < 1e-5);
    }
  }
}
