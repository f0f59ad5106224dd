// Non-finite numbers never reach a metric (failed requests naming task, doc and
// position; honest overflow notes), the memory plan of a run is checked before
// any forward pass, and the results record the SHA-256 of the bytes loaded.
#include <doctest/doctest.h>

#include <map>
#include <set>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>

#include <fmt/format.h>

#include "eval/metrics.hpp"
#include "eval/runner.hpp"
#include "model/context.hpp"
#include "gguf_copy.hpp"
#include "test_support.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

EvalSpec spec_for(const std::string& model, json j) {
  j["model"] = model;
  return parse_spec(j, "test.json", ".");
}

const MetricValue& metric(const std::vector<MetricValue>& ms, const std::string& name) {
  for (const auto& m : ms)
    if (m.name == name) return m;
  FAIL("metric not found: " << name);
  static MetricValue none;
  return none;
}

/// A multiple-choice task (doc 0 reads " Once", token 403; doc 1 does not), a
/// loglikelihood task, a rolling task and a generation task.
json four_tasks() {
  json mc = {{"name", "mc"},
             {"output_type", "multiple_choice"},
             {"docs",
              {{{"q", "Once upon a time there was a"}, {"c", {"girl", "car"}}, {"g", 0}},
               {{"q", "Tom had a red"}, {"c", {"ball", "sky"}}, {"g", 0}}}},
             {"doc_to_text", "q"},
             {"doc_to_choice", "c"},
             {"doc_to_target", "g"}};
  json ll = {{"name", "ll"}, {"output_type", "loglikelihood"},
             {"docs", {{{"c", "Lily went to the"}, {"x", "park"}}}}, {"doc_to_text", "c"}, {"doc_to_target", "x"}};
  json roll = {{"name", "roll"}, {"output_type", "loglikelihood_rolling"},
               {"docs", {{{"t", "Tom had a dog. The dog liked to run."}}}}, {"doc_to_target", "t"}};
  json gen = {{"name", "gen"}, {"output_type", "generate_until"},
              {"docs", {{{"p", "Tom had a"}, {"a", "dog"}}}}, {"doc_to_text", "p"}, {"doc_to_target", "a"},
              {"generation_kwargs", {{"max_gen_toks", 6}}}};
  return {{"max_length", 64}, {"batch_size", 4}, {"tasks", {mc, ll, roll, gen}}};
}

}  // namespace

TEST_SUITE("eval.runtime_checks") {
  TEST_CASE("a non-finite log-prob reaching the metrics is an internal error naming task and doc, never 'overflow'") {
    TaskSpec t;
    t.name = "story_cloze";
    t.output_type = OutputType::MultipleChoice;
    t.metric_list = metrics_for(t.output_type);
    t.docs.resize(2);
    for (auto& d : t.docs) d.choices = {"a", "b"};
    std::vector<DocOutcome> o(2);
    o[0].ok = o[1].ok = true;
    o[0].choice_logprobs = {-1.0, -2.0};
    o[1].choice_logprobs = {std::numeric_limits<double>::quiet_NaN(), -2.0};
    CHECK_THROWS_WITH_AS(compute_metrics(t, o), doctest::Contains("task 'story_cloze' doc 1: a non-finite log-prob"), Error);
    TaskSpec l;
    l.name = "l";
    l.output_type = OutputType::Loglikelihood;
    l.metric_list = metrics_for(l.output_type);
    l.docs.resize(1);
    std::vector<DocOutcome> lo(1);
    lo[0].ok = true;
    lo[0].logprob = -std::numeric_limits<double>::infinity();
    CHECK_THROWS_AS(compute_metrics(l, lo), Error);
  }

  TEST_CASE("a genuine overflow says so, with the exponent and the documents and requests involved") {
    TaskSpec l;
    l.name = "l";
    l.output_type = OutputType::Loglikelihood;
    l.metric_list = metrics_for(l.output_type);
    l.docs.resize(1);
    std::vector<DocOutcome> o(1);
    o[0].ok = true, o[0].logprob = -800.0, o[0].requests = 1;
    const auto ms1 = compute_metrics(l, o);
    const MetricValue& p = metric(ms1, "perplexity");
    CHECK_FALSE(p.value);
    CHECK(p.note == "overflow: exp(800) exceeds the double range (1 document, 1 request)");
    // finite perplexity whose bootstrap stderr overflows (a resample of -718s): the value stays, the stderr says why
    l.docs.resize(2);
    o.resize(2);
    o[0].logprob = -700.0, o[1].logprob = -718.0, o[1].ok = true;
    const auto ms2 = compute_metrics(l, o);
    const MetricValue& q = metric(ms2, "perplexity");
    CHECK(*q.value == doctest::Approx(std::exp(709.0)));
    CHECK_FALSE(q.stderr_);
    CHECK(q.note.rfind("overflow: the bootstrap stderr of perplexity", 0) == 0);

    TaskSpec r;
    r.name = "r";
    r.output_type = OutputType::LoglikelihoodRolling;
    r.metric_list = metrics_for(r.output_type);
    Doc d;
    d.target = "ten bytes!";  // 10 bytes, 2 words
    r.docs = {d};
    std::vector<DocOutcome> ro(1);
    ro[0].ok = true, ro[0].logprob = -1e6, ro[0].tokens = 4, ro[0].requests = 3;
    auto ms = compute_metrics(r, ro);
    CHECK(metric(ms, "byte_perplexity").note == "overflow: exp(100000) exceeds the double range (1 document, 3 requests)");
    CHECK(metric(ms, "word_perplexity").note == "overflow: exp(500000) exceeds the double range (1 document, 3 requests)");
    CHECK(*metric(ms, "bits_per_byte").value == doctest::Approx(1e5 / std::log(2.0)));  // no exp: a number

    // rolling_method "llama.cpp": a mean nll of 800 over 2 chunks of 5 tokens overflows; a NaN never gets here
    r.metric_list = {kPerplexityLlamaCpp};
    ChunkedOutcome c;
    c.ok = true, c.chunks = 2, c.tokens = 10, c.sum_nll = 8000.0, c.sum_nll_sq = 6.4e6;
    CHECK(metric(compute_metrics(r, ro, 0, &c), kPerplexityLlamaCpp).note ==
          "overflow: exp(800) exceeds the double range (2 chunks, 10 tokens)");
    c.sum_nll = std::numeric_limits<double>::quiet_NaN();
    CHECK_THROWS_WITH_AS(compute_metrics(r, ro, 0, &c), doctest::Contains("non-finite log-prob reached perplexity_llamacpp"),
                         Error);
  }

  TEST_CASE("activations overflowing with finite weights: every request fails naming task, doc and position" * test::needs_model()) {
    test::ScratchDir dir("eval_overflow");
    const std::string path = (dir.path / "overflow.gguf").string();
    test::GgufEdit e;
    e.tensor = [](const std::string& name, std::vector<float>& w) {
      if (name == "blk.0.attn_norm.weight") std::fill(w.begin(), w.end(), 1e30f);
    };
    test::write_variant(test::model_path(), path, e);
    EvalSpec spec = spec_for(path, four_tasks());
    RunResult res = run_spec(spec);
    CHECK(res.n_request_errors == static_cast<int>(res.requests.size()));
    for (const Request& r : res.requests) {
      CAPTURE(r.error);
      CHECK(r.error.find(fmt::format("task '{}' doc {}", spec.tasks[static_cast<size_t>(r.task)].name, r.doc)) == 0);
      if (r.kind == RequestKind::Generate)
        CHECK(r.error.find("non-finite logits (NaN or Inf) at token position 5 (after 0 generated tokens)") != std::string::npos);
      else
        CHECK(r.error.find(fmt::format("non-finite logits (NaN or Inf) predicting token position {} of", r.score.score_from)) !=
              std::string::npos);
    }
    for (size_t t = 0; t < res.metrics.size(); ++t)
      for (const auto& m : res.metrics[t]) {
        CAPTURE(m.name);
        CHECK_FALSE(m.value);  // acc is never 1.0 (nor anything else) for a broken model
        // "all 3 requests failed", or for a task of one request "its 1 request failed"
        CHECK((m.note.find("requests failed") != std::string::npos || m.note == "its 1 request failed"));
        CHECK(m.note.find("overflow") == std::string::npos);
      }
  }

  TEST_CASE("one NaN in a token's embedding: the documents reading it fail, the others are scored as by the clean model" * test::needs_model()) {
    test::ScratchDir dir("eval_nan");
    const std::string path = (dir.path / "nan.gguf").string();
    test::GgufEdit e;
    e.tensor = [](const std::string& name, std::vector<float>& w) {
      if (name == "token_embd.weight") w[403 * 64] = std::numeric_limits<float>::quiet_NaN();  // " Once"
    };
    test::write_variant(test::model_path(), path, e);
    json j = four_tasks();
    j["tasks"] = json::array({j["tasks"][0]});  // the multiple-choice task
    // by default the load refuses it by name; without the scan the run meets the NaN
    CHECK_THROWS_WITH_AS(run_spec(spec_for(path, j)), doctest::Contains("token_embd.weight"), FormatError);
    ModelOptions no_scan;
    no_scan.threads = 1;
    no_scan.check_finite = false;
    std::unique_ptr<Model> nan_model = Model::load(path, no_scan);
    Context nan_ctx(*nan_model);
    RunResult res = run_eval(spec_for(path, j), nan_ctx);
    RunResult clean = run_spec(spec_for(test::model_path(), j));
    CHECK(res.n_request_errors == 2);  // both choices of doc 0
    for (const Request& r : res.requests) {
      CAPTURE(r.error);
      if (r.doc == 0)
        CHECK(r.error.find(fmt::format("task 'mc' doc 0 (test.json: tasks[0].docs[0]) choice {}: non-finite logits", r.index)) == 0);
      else
        CHECK(r.error.empty());
    }
    const MetricValue& acc = metric(res.metrics[0], "acc");
    CHECK(acc.n == 1);
    const auto& ll = clean.docs[0][1].choice_logprobs;  // gold 0; ties go to the first choice
    CHECK(*acc.value == (ll[0] >= ll[1] ? 1.0 : 0.0));
    CHECK(res.docs[0][1].choice_logprobs == clean.docs[0][1].choice_logprobs);
  }

  TEST_CASE("the memory plan: KV cache and activations by hand; a plan too big is refused before any forward pass" * test::needs_model()) {
    std::unique_ptr<Model> own = Model::load(test::model_path(), {.threads = 1});
    Model& m = *own;
    Context ctx(m);
    EvalSpec spec = spec_for(test::model_path(), four_tasks());
    std::vector<std::string> warnings;
    auto reqs = build_requests(spec, m.tokenizer(), 64, &warnings);
    MemoryPlan p = plan_memory(spec, m, reqs, 4, 64);
    // one generation request "Tom had a" (BOS + 4 tokens = 5) + max_gen_toks 6: 1 row x 11 positions, K and V float32
    CHECK(p.cache_rows == 1);
    CHECK(p.cache_positions == 11);
    CHECK(p.kv_cache == size_t{2} * 5 * 1 * 4 * 11 * 8 * 4);
    CHECK(p.weights == m.weight_bytes());
    // the scoring rows: the rolling window alone; the loglikelihood requests (mc's choices and ll) sorted by
    // their tokens into tries of at most max_length = 64 tokens, counted as sets of prefixes (a prefix of a
    // request's tokens but its last is a token; a prefix before a scored token a logits row); passes of 4 rows
    struct RowCount {
      int64_t tokens = 0, logits = 0;
    };
    std::vector<RowCount> rows;
    std::vector<std::pair<std::vector<int32_t>, int>> packed;
    for (const auto& r : reqs) {
      if (r.kind == RequestKind::Generate) continue;
      const int64_t size = static_cast<int64_t>(r.score.tokens.size()), from = r.score.score_from;
      if (r.kind == RequestKind::Loglikelihood)
        packed.emplace_back(r.score.tokens, r.score.score_from);
      else
        rows.push_back({size - 1, size - from});
    }
    std::sort(packed.begin(), packed.end());
    std::set<std::vector<int32_t>> nodes, scoring;
    auto close = [&] {
      rows.push_back({static_cast<int64_t>(nodes.size()), static_cast<int64_t>(scoring.size())});
      nodes.clear();
      scoring.clear();
    };
    for (const auto& [t, from] : packed) {
      std::set<std::vector<int32_t>> more = nodes;
      for (size_t n = 1; n < t.size(); ++n) more.emplace(t.begin(), t.begin() + long(n));
      if (!nodes.empty() && more.size() > 64) {
        close();
        more.clear();
        for (size_t n = 1; n < t.size(); ++n) more.emplace(t.begin(), t.begin() + long(n));
      }
      nodes = std::move(more);
      for (size_t k = size_t(from); k < t.size(); ++k) scoring.emplace(t.begin(), t.begin() + long(k));
    }
    if (!nodes.empty()) close();
    size_t most = 0;
    for (size_t r0 = 0; r0 < rows.size(); r0 += 4) {
      int64_t tokens = 0, seq = 0, logit_rows = 0;
      const size_t r1 = std::min(rows.size(), r0 + 4);
      for (size_t j = r0; j < r1; ++j) tokens += rows[j].tokens, seq = std::max(seq, rows[j].tokens), logit_rows += rows[j].logits;
      most = std::max(most, m.activation_bytes_for(int(r1 - r0), static_cast<int>(seq), false, tokens, logit_rows));
    }
    CHECK(rows.size() >= 2);
    CHECK(p.activations == most);

    RunOptions o;
    o.memory_budget = MemoryBudget{p.kv_cache + p.activations - 1, "a test budget"};
    const uint64_t calls = ctx.stats().forward_calls;
    try {
      run_eval(spec, ctx, o);
      FAIL("ran");
    } catch (const MemoryError& e) {
      const std::string msg = e.what();
      CAPTURE(msg);
      CHECK(msg.find("not enough memory for the run of test.json") == 0);
      CHECK(msg.find(fmt::format("KV cache (1 row x 11 positions) {} ({} bytes)", format_bytes(p.kv_cache), p.kv_cache)) !=
            std::string::npos);
      CHECK(msg.find(fmt::format("activations (batch_size 4) {} ({} bytes)", format_bytes(p.activations), p.activations)) !=
            std::string::npos);
      CHECK(msg.find("is available (a test budget)") != std::string::npos);
      CHECK(msg.find("already loaded") != std::string::npos);
      CHECK(msg.find('\n') == std::string::npos);
    }
    CHECK(ctx.stats().forward_calls == calls);  // refused before anything ran
    CHECK_FALSE(ctx.caches_are_setup());
    o.memory_budget = MemoryBudget{p.kv_cache + p.activations, "exactly enough"};
    CHECK_NOTHROW(run_eval(spec, ctx, o));
  }

  TEST_CASE("batch_size auto: the largest batch whose plan fits 9/10 of one reading of the memory available; the check "
            "uses that reading" * test::needs_model()) {
    std::unique_ptr<Model> own = Model::load(test::model_path(), {.threads = 1});
    Context ctx(*own);
    EvalSpec spec = spec_for(test::model_path(), four_tasks());
    spec.max_length = 64;
    spec.batch_size_auto = true;
    std::vector<std::string> warnings;
    const auto reqs = build_requests(spec, own->tokenizer(), 64, &warnings);
    auto need = [&](int b) {
      const MemoryPlan p = plan_memory(spec, *own, reqs, b, 64);
      return static_cast<uint64_t>(p.kv_cache + p.activations);
    };
    int k = 2;  // the first batch size whose plan leaves room for batch 1's in 9/10 of it
    while (k <= kAutoBatchMax && need(k) - need(k) / 10 < need(1)) ++k;
    REQUIRE(k <= kAutoBatchMax);
    std::vector<std::string> lines;
    RunOptions o;
    o.log = [&](const std::string& l) { lines.push_back(l); };
    // exactly need(k) available: batch k would leave nothing, so auto picks a smaller one, within 9/10 of it
    o.memory_budget = MemoryBudget{need(k), "a test budget"};
    RunResult r = run_eval(spec, ctx, o);
    CHECK(r.batch_size < k);
    CHECK(need(r.batch_size) <= need(k) - need(k) / 10);
    CHECK(need(r.batch_size + 1) > need(k) - need(k) / 10);  // the largest such
    // 10/9 of need(k) (rounded up): batch k fits in 9/10 of it
    const uint64_t roomy = (need(k) * 10 + 8) / 9;
    o.memory_budget = MemoryBudget{roomy, "a test budget"};
    lines.clear();
    r = run_eval(spec, ctx, o);
    CHECK(r.batch_size >= k);
    CHECK(need(r.batch_size) <= roomy - roomy / 10);
    CHECK((r.batch_size == kAutoBatchMax || need(r.batch_size + 1) > roomy - roomy / 10));
    CHECK(std::any_of(lines.begin(), lines.end(), [&](const std::string& l) {
      return l.find(fmt::format("batch_size auto: {} ({} bytes of KV cache and activations; {} of the {} bytes available "
                                "(a test budget); at most 64)",
                                r.batch_size, need(r.batch_size), roomy - roomy / 10, roomy)) == 0;
    }));

    // The memory available drops to nothing right after auto's pick (its log line): the check uses the
    // reading the pick was made against, so the run goes on. (KVEVAL_MEMORY_LIMIT_BYTES: a limit less VmRSS.)
    ::setenv("KVEVAL_MEMORY_LIMIT_BYTES", "1099511627776", 1);  // 1 TiB: MemAvailable or the cgroup decides
    RunOptions shrink;
    shrink.log = [](const std::string& l) {
      if (l.starts_with("batch_size auto:")) ::setenv("KVEVAL_MEMORY_LIMIT_BYTES", "1", 1);
    };
    std::string refused;
    try {
      r = run_eval(spec, ctx, shrink);
    } catch (const MemoryError& e) {
      refused = e.what();
    }
    ::unsetenv("KVEVAL_MEMORY_LIMIT_BYTES");
    CHECK(refused == "");
    CHECK(r.batch_size >= 1);
    CHECK(r.docs.size() == spec.tasks.size());
  }

  TEST_CASE("the results record the SHA-256 of the bytes loaded, even when the file is truncated afterwards" * test::needs_model()) {
    test::ScratchDir dir("eval_sha");
    const std::string copy = (dir.path / "m.gguf").string();
    fs::copy_file(test::model_path(), copy);
    json j = four_tasks();
    j["tasks"] = json::array({j["tasks"][1]});
    RunResult res = run_spec(spec_for(copy, j));
    fs::resize_file(copy, 100);
    CHECK(res.model_sha256 == "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
    CHECK(sha256_file(copy) != res.model_sha256);
    RunOptions no_hash;
    no_hash.hash_model = false;
    CHECK(run_spec(spec_for(test::model_path(), j), no_hash).model_sha256.empty());
  }
}
