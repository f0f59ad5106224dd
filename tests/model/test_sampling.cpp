// Seeded sampling (model/sampling.hpp): Philox4x32-10 against Random123's
// known-answer vectors; the warped distribution against a naive float64
// re-derivation of Hugging Face's warpers; the empirical frequencies of 20,000
// draws against it (chi-square at a fixed seed); on stories260K, sampled
// generations identical for every cache row count, schedule and thread count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "context_support.hpp"
#include "model/context.hpp"
#include "model/sampling.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

/// The kept tokens and probabilities, re-derived the plain way: softmax of
/// logits / T; top-k keeps scores >= the k-th largest; top-p sorts ascending and
/// drops while the cumulative probability <= 1 - top_p (never the largest);
/// min-p drops p < min_p * max p; renormalised. (Ties do not occur in the cases.)
std::map<int32_t, double> naive(const std::vector<float>& logits, const SamplingParams& p) {
  const size_t V = logits.size();
  std::vector<double> x(V);
  for (size_t i = 0; i < V; ++i) x[i] = static_cast<double>(logits[i]) / p.temperature;
  std::vector<bool> keep(V, true);
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < V) {
    std::vector<double> s = x;
    std::sort(s.rbegin(), s.rend());
    for (size_t i = 0; i < V; ++i) keep[i] = x[i] >= s[static_cast<size_t>(p.top_k - 1)];
  }
  auto probs = [&] {
    std::vector<double> q(V, 0.0);
    double z = 0;
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) z += std::exp(x[i]);
    for (size_t i = 0; i < V; ++i)
      if (keep[i]) q[i] = std::exp(x[i]) / z;
    return q;
  };
  if (p.top_p < 1) {
    std::vector<double> q = probs();
    std::vector<size_t> idx(V);
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) { return q[a] < q[b]; });
    double cum = 0;
    for (size_t j = 0; j + 1 < V; ++j) {
      cum += q[idx[j]];
      if (cum <= 1 - p.top_p) keep[idx[j]] = false;
    }
  }
  if (p.min_p > 0) {
    std::vector<double> q = probs();
    const double top = *std::max_element(q.begin(), q.end());
    for (size_t i = 0; i < V; ++i)
      if (q[i] < p.min_p * top) keep[i] = false;
  }
  std::vector<double> q = probs();
  std::map<int32_t, double> out;
  for (size_t i = 0; i < V; ++i)
    if (keep[i]) out[static_cast<int32_t>(i)] = q[i];
  return out;
}

/// Upper 0.1% points of the chi-square distribution, df = 1..15 (standard tables).
constexpr double kChi2_999[] = {10.828, 13.816, 16.266, 18.467, 20.515, 22.458, 24.322, 26.124,
                                27.877, 29.588, 31.264, 32.909, 34.528, 36.123, 37.697};

const std::vector<float> kLogits = {1.0f, 2.5f, -0.5f, 0.3f, 3.1f, 2.2f, -1.7f, 0.9f, 1.6f, -0.2f, 2.8f, 0.0f};

struct Case {
  const char* name;
  SamplingParams p;
  size_t kept;  ///< tokens the naive derivation keeps (hand-checked: makes each warper bite)
};

std::vector<Case> cases() {
  auto sp = [](double t, int k, double top_p, double min_p) {
    SamplingParams p;
    p.do_sample = true;
    p.temperature = t;
    p.top_k = k;
    p.top_p = top_p;
    p.min_p = min_p;
    return p;
  };
  return {{"temperature 0.7", sp(0.7, 0, 1.0, 0.0), 12},
          {"temperature 1.5, top_k 5", sp(1.5, 5, 1.0, 0.0), 5},
          {"top_p 0.8", sp(1.0, 0, 0.8, 0.0), 4},
          {"min_p 0.1", sp(1.0, 0, 1.0, 0.1), 7},
          {"temperature 0.8, top_k 8, top_p 0.9, min_p 0.05", sp(0.8, 8, 0.9, 0.05), 5}};
}

}  // namespace

TEST_SUITE("model.sampling") {
  TEST_CASE("Philox4x32-10 gives Random123's known answers") {
    using A4 = std::array<uint32_t, 4>;
    CHECK(philox4x32_10({0, 0, 0, 0}, {0, 0}) == A4{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
    CHECK(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
          A4{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
    CHECK(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
          A4{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
  }

  TEST_CASE("sample_uniform: in [0, 1), a pure function of each key part") {
    const double u = sample_uniform(7, 3, 1, 5);
    CHECK(u >= 0.0);
    CHECK(u < 1.0);
    CHECK(sample_uniform(7, 3, 1, 5) == u);
    CHECK(sample_uniform(8, 3, 1, 5) != u);
    CHECK(sample_uniform(7, 4, 1, 5) != u);
    CHECK(sample_uniform(7, 3, 2, 5) != u);
    CHECK(sample_uniform(7, 3, 1, 6) != u);
    CHECK(sample_uniform(7, uint64_t{3} << 32, 1, 5) != sample_uniform(7, 0, 1, 5));  // the high word counts
    // mean of 10,000 uniforms: 0.5 within 5 standard errors (0.2887 / 100)
    double sum = 0;
    for (uint32_t s = 0; s < 10000; ++s) sum += sample_uniform(1, 0, 0, s);
    CHECK(std::abs(sum / 10000 - 0.5) < 5 * 0.2887 / 100);
  }

  TEST_CASE("greedy parameters take the first argmax") {
    SamplingScratch s;
    SamplingParams off;  // do_sample false
    const std::vector<float> tie = {0.5f, 2.0f, 2.0f, -1.0f};
    CHECK(sample_token(tie, off, 0.99, s) == 1);
    SamplingParams cold;
    cold.do_sample = true;
    cold.temperature = 0.0;
    CHECK(sample_token(tie, cold, 0.99, s) == 1);
    CHECK(sampling_distribution(tie, cold) == std::vector<std::pair<int32_t, double>>{{1, 1.0}});
  }

  TEST_CASE("the warped distribution equals a naive float64 derivation; 20,000 draws pass a chi-square test") {
    SamplingScratch s;
    uint64_t request = 0;
    for (const Case& c : cases()) {
      CAPTURE(c.name);
      const auto want = naive(kLogits, c.p);
      REQUIRE(want.size() == c.kept);
      const auto got = sampling_distribution(kLogits, c.p);
      REQUIRE(got.size() == want.size());
      for (const auto& [id, prob] : got) {
        REQUIRE(want.count(id) == 1);
        CHECK(std::abs(prob - want.at(id)) < 1e-12);
      }
      constexpr int kDraws = 20000;
      std::map<int32_t, int> count;
      for (uint32_t step = 0; step < kDraws; ++step)
        ++count[sample_token(kLogits, c.p, sample_uniform(42, request, 0, step), s)];
      ++request;
      double chi2 = 0;
      for (const auto& [id, n] : count) REQUIRE(want.count(id) == 1);  // never a removed token
      for (const auto& [id, prob] : want) {
        const double e = kDraws * prob;
        const double o = count.count(id) ? count.at(id) : 0;
        chi2 += (o - e) * (o - e) / e;
      }
      const size_t df = want.size() - 1;
      CAPTURE(chi2);
      CHECK(chi2 < kChi2_999[df - 1]);
    }
  }

  TEST_CASE("a skewed distribution: the draw moves with u over the CDF in ascending token order") {
    SamplingScratch s;
    SamplingParams p;
    p.do_sample = true;
    p.top_k = 0;
    const std::vector<float> l = {0.0f, std::log(3.0f), 0.0f};  // probabilities 0.2, 0.6, 0.2
    CHECK(sample_token(l, p, 0.0, s) == 0);
    CHECK(sample_token(l, p, 0.19, s) == 0);
    CHECK(sample_token(l, p, 0.21, s) == 1);
    CHECK(sample_token(l, p, 0.79, s) == 1);
    CHECK(sample_token(l, p, 0.81, s) == 2);
    CHECK(sample_token(l, p, 0.999999, s) == 2);
  }
}

namespace {

/// 8 prompts cut from the reference story, sampled (T 1.2, top_k 40, top_p 0.95,
/// seed 11) with keys {100 + i, i % 2} in a cache of `rows` rows.
std::vector<Generation> sampled(Context& m, int rows, Batching b, bool do_sample = true) {
  const auto story = m.model().tokenizer().encode(test::reference_cases("rolling")[0]["text"].get<std::string>(), true);
  std::vector<std::vector<int32_t>> prompts;
  GenerateOptions o;
  o.max_gen_toks.clear();
  const std::vector<int> lens = {1, 9, 30, 4, 17, 2, 25, 12};
  for (size_t i = 0; i < lens.size(); ++i) {
    prompts.push_back(std::vector<int32_t>(story.begin(), story.begin() + lens[i]));
    o.max_gen_toks.push_back(20 + 7 * static_cast<int>(i));
    o.sample_keys.push_back({100 + i, static_cast<uint32_t>(i % 2)});
  }
  SamplingParams p;
  p.do_sample = do_sample;
  p.temperature = 1.2;
  p.top_k = 40;
  p.top_p = 0.95;
  p.seed = 11;
  o.sampling = {p};
  o.batching = b;
  KvCacheScope scope(m, rows, 128);
  return generate_greedy(m, prompts, o);
}

}  // namespace

TEST_SUITE("model.sampling") {
  TEST_CASE("stories260K: sampled ids equal for 1, 3 and 8 rows, static and dynamic, 1 and 2 threads" *
            kveval::test::needs_model()) {
    Context& two = test::real_context();
    const auto ref = sampled(two, 1, Batching::Static);
    // sampling happened: most prompts leave the greedy continuation, and every prompt produced tokens
    const auto greedy = sampled(two, 1, Batching::Static, false);
    int differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      differ += ref[i].ids != greedy[i].ids;
      CHECK(!ref[i].ids.empty());
    }
    CHECK(differ >= 4);
    const auto one_thread = test::load_context(test::model_path(), {.threads = 1});
    for (int rows : {1, 3, 8})
      for (Batching b : {Batching::Static, Batching::Dynamic}) {
        CAPTURE(rows);
        const std::string schedule = to_string(b);
        CAPTURE(schedule);
        const auto a = sampled(two, rows, b);
        const auto c = sampled(*one_thread, rows, b);
        for (size_t i = 0; i < ref.size(); ++i) {
          CAPTURE(i);
          CHECK(a[i].ids == ref[i].ids);
          CHECK(c[i].ids == ref[i].ids);
          CHECK(a[i].reason == ref[i].reason);
        }
      }
  }
}
