#include <doctest/doctest.h>

#include <cmath>

#include "eval/metrics.hpp"

using namespace kveval::eval;

namespace {

const MetricValue& find(const std::vector<MetricValue>& ms, const std::string& name) {
  for (const auto& m : ms)
    if (m.name == name) return m;
  FAIL("metric not found: " << name);
  static MetricValue none;
  return none;
}

TaskSpec task(OutputType t) {
  TaskSpec s;
  s.name = "t";
  s.output_type = t;
  s.metric_list = metrics_for(t);
  return s;
}

}  // namespace

TEST_SUITE("eval.metrics") {
  TEST_CASE("mean and standard error (sample std / sqrt(n))") {
    std::vector<double> x = {1, 0, 1, 1};
    CHECK(*mean(x) == doctest::Approx(0.75));
    // var_{n-1} = (3 * 0.0625 + 0.5625) / 3 = 0.25; se = sqrt(0.25 / 4) = 0.25
    CHECK(*mean_stderr(x) == doctest::Approx(0.25));
    CHECK(!mean(std::vector<double>{}).has_value());
    CHECK(!mean_stderr(std::vector<double>{1.0}).has_value());
  }

  TEST_CASE("word counts follow len(re.split(r'\\s+', text))") {
    CHECK(count_words("a b  c") == 3);
    CHECK(count_words(" a b") == 3);  // leading whitespace gives an empty first item
    CHECK(count_words("a\n\tb ") == 3);
    CHECK(count_words("") == 1);
    CHECK(count_words("word") == 1);
  }

  TEST_CASE("acc_norm divides by characters, acc_bytes by UTF-8 bytes (lm-eval pred_norm / pred_byte)") {
    TaskSpec t = task(OutputType::MultipleChoice);
    t.metric_list = {"acc", "acc_norm", "acc_bytes"};
    Doc d;
    d.choices = {"café", "cafe"};  // 4 characters each; 5 and 4 UTF-8 bytes
    d.gold = 0;
    t.docs = {d};
    DocOutcome o;
    o.ok = true;
    o.choice_logprobs = {-4.5, -4.2};
    // raw: cafe wins; per character: -1.125 (café) < -1.05 (cafe): cafe; per byte: -0.9 > -1.05: café
    auto ms = compute_metrics(t, std::vector<DocOutcome>{o});
    CHECK(find(ms, "acc").value == 0.0);
    CHECK(find(ms, "acc_norm").value == 0.0);
    CHECK(find(ms, "acc_bytes").value == 1.0);
    CHECK(find(ms, "acc").n == 1);
    CHECK(!find(ms, "acc").stderr_.has_value());
    // the per-document values of the samples file agree
    auto v = doc_metric_values(t, d, o);
    REQUIRE(v.size() == 3);
    CHECK(v[0].first == "acc");
    CHECK(v[0].second == 0.0);
    CHECK(v[1].second == 0.0);
    CHECK(v[2].first == "acc_bytes");
    CHECK(v[2].second == 1.0);
    CHECK(count_chars("café") == 4);
    CHECK(count_chars("日本") == 2);
  }

  TEST_CASE("default metrics are lm-eval's; acc_bytes and token_perplexity only when listed") {
    CHECK(default_metrics_for(OutputType::MultipleChoice) == std::vector<std::string>{"acc", "acc_norm"});
    CHECK(default_metrics_for(OutputType::LoglikelihoodRolling) ==
          std::vector<std::string>{"word_perplexity", "byte_perplexity", "bits_per_byte"});
    CHECK(default_metrics_for(OutputType::Loglikelihood) == std::vector<std::string>{"perplexity", "acc"});
    CHECK(default_metrics_for(OutputType::GenerateUntil) == std::vector<std::string>{"exact_match"});
  }

  TEST_CASE("multiple_choice ties go to the first choice (numpy argmax)") {
    CHECK(argmax_first(std::vector<double>{-1, -1, -2}) == 0);
    CHECK(argmax_first(std::vector<double>{-3, -1, -1}) == 1);
  }

  TEST_CASE("loglikelihood: acc = is_greedy, perplexity = exp(-mean ll) with lm-eval's bootstrap stderr") {
    TaskSpec t = task(OutputType::Loglikelihood);
    t.docs.resize(3);
    std::vector<DocOutcome> o(3);
    double ll[3] = {-1.0, -2.0, -3.0};
    for (int i = 0; i < 3; ++i) o[i].ok = true, o[i].logprob = ll[i], o[i].is_greedy = i == 0;
    auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "acc").value == doctest::Approx(1.0 / 3));
    CHECK(*find(ms, "perplexity").value == doctest::Approx(std::exp(2.0)));
    // lm-eval's bootstrap_stderr(perplexity, [-1, -2, -3], 100000), printed by CPython 3.11
    CHECK(*find(ms, "perplexity").stderr_ == 3.973436005477724);
    // one resample has no standard deviation: the note names that, not the document count
    auto one = compute_metrics(t, o, 1);
    CHECK(!find(one, "perplexity").stderr_.has_value());
    CHECK(find(one, "perplexity").note == "bootstrap_iters 1: a stderr needs 2 resamples");
  }

  TEST_CASE("one document: no metric has a stderr (lm-eval's \"N/A\" for n < 2), never a bootstrap of rounding") {
    // the 100000 bootstrap resamples of one log-prob are all exp(0.4513); their mean
    // differs from it by rounding, which a bootstrap would report as a stderr of ~2e-13
    TaskSpec ll = task(OutputType::Loglikelihood);
    ll.docs.resize(1);
    DocOutcome o;
    o.ok = true, o.logprob = -0.4513, o.is_greedy = true, o.tokens = 3;
    for (const auto& m : compute_metrics(ll, std::vector<DocOutcome>{o})) {
      CAPTURE(m.name);
      CHECK(m.value.has_value());
      CHECK(m.n == 1);
      CHECK_FALSE(m.stderr_.has_value());
      CHECK(m.note == "stderr needs n >= 2");
    }
    CHECK(*find(compute_metrics(ll, std::vector<DocOutcome>{o}), "perplexity").value == doctest::Approx(std::exp(0.4513)));
    // the rolling task's corpus-level ratios have no stderr at any n
    TaskSpec rolling = task(OutputType::LoglikelihoodRolling);
    rolling.docs.resize(1);
    rolling.docs[0].target = "one two";
    for (const auto& m : compute_metrics(rolling, std::vector<DocOutcome>{o})) {
      CAPTURE(m.name);
      CHECK(m.value.has_value());
      CHECK_FALSE(m.stderr_.has_value());
    }
  }

  TEST_CASE("rolling: lm-eval weighted perplexities and bits per byte") {
    TaskSpec t = task(OutputType::LoglikelihoodRolling);
    Doc a, b;
    a.target = "one two";      // 2 words, 7 bytes
    b.target = "three é";      // 2 words, 8 bytes
    t.docs = {a, b};
    std::vector<DocOutcome> o(2);
    o[0].ok = o[1].ok = true;
    o[0].logprob = -10, o[0].tokens = 4;
    o[1].logprob = -5, o[1].tokens = 6;
    auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "word_perplexity").value == doctest::Approx(std::exp(15.0 / 4)));
    CHECK(*find(ms, "byte_perplexity").value == doctest::Approx(std::exp(15.0 / 15)));
    CHECK(*find(ms, "bits_per_byte").value == doctest::Approx(15.0 / 15 / std::log(2.0)));
    CHECK(*find(ms, "token_perplexity").value == doctest::Approx(std::exp(15.0 / 10)));
    CHECK(!find(ms, "word_perplexity").stderr_.has_value());
  }

  TEST_CASE("failed documents are excluded; an empty set gives n/a, never NaN") {
    TaskSpec t = task(OutputType::LoglikelihoodRolling);
    t.docs.resize(1);
    std::vector<DocOutcome> o(1);  // ok = false
    for (const auto& m : compute_metrics(t, o)) {
      CHECK(!m.value.has_value());
      CHECK(m.n == 0);
      CHECK(m.note == "no documents");
    }
    TaskSpec l = task(OutputType::Loglikelihood);
    l.docs.resize(2);
    std::vector<DocOutcome> lo(2);
    lo[1].ok = true, lo[1].logprob = -1, lo[1].is_greedy = true;
    auto ms = compute_metrics(l, lo);
    CHECK(find(ms, "acc").n == 1);
    CHECK(*find(ms, "perplexity").value == doctest::Approx(std::exp(1.0)));
  }

  TEST_CASE("exact_match compares as lm-eval: no stripping, case and whitespace count") {
    TaskSpec t = task(OutputType::GenerateUntil);
    Doc a, b, c;
    a.target = " Lily", b.target = "Lily", c.target = " lily";
    a.has_target = b.has_target = c.has_target = true;
    t.docs = {a, b, c};
    std::vector<DocOutcome> o(3);
    for (auto& x : o) x.ok = true, x.output = " Lily";
    auto ms = compute_metrics(t, o);
    CHECK(*find(ms, "exact_match").value == doctest::Approx(1.0 / 3));
    CHECK(find(ms, "exact_match").n == 3);
  }
}
