// The runner on the real model (stories260K): reference values, the cache-free
// log-likelihood phase, the scoped generation cache, determinism, stops.
#include <doctest/doctest.h>

#include <cmath>

#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval_test_util.hpp"
#include "test_support.hpp"
#include "util/error.hpp"
#include "context_support.hpp"

using kveval::test::real_context;
using namespace kveval;
using namespace kveval::eval;
using nlohmann::json;
using kveval::test::gen_task;

namespace {

/// Agreement with the reference values (nats): measured worst 3.9e-6 (tests/model/test_model.cpp).
constexpr double kRefTol = 2e-5;

EvalSpec spec_of(json j) {
  j["model"] = kveval::test::model_path();
  return parse_spec(j, "test.json", ".");
}

json reference_spec(int batch_size) {
  json ll = json::array(), roll = json::array();
  for (const auto& c : kveval::test::reference_cases("loglikelihood"))
    ll.push_back({{"c", c["context"]}, {"x", c["continuation"]}});
  for (const auto& r : kveval::test::reference_cases("rolling")) roll.push_back({{"text", r["text"]}});
  return {{"batch_size", batch_size},
          {"tasks",
           {{{"name", "ref_ll"}, {"output_type", "loglikelihood"}, {"docs", ll}, {"doc_to_text", "c"},
             {"doc_to_target", "x"}, {"target_delimiter", ""}},
            {{"name", "ref_roll"}, {"output_type", "loglikelihood_rolling"}, {"docs", roll}, {"doc_to_target", "text"}}}}};
}

/// A mixed spec: generation, multiple choice, loglikelihood, rolling.
json mixed_spec(int batch_size, bool generation_first) {
  json mc = {{"name", "mc"},
             {"output_type", "multiple_choice"},
             {"docs",
              {{{"q", "Lily went to the park to play with her"}, {"c", {"ball", "car", "cloud", "spoon"}}, {"g", 0}},
               {{"q", "The cat liked to drink"}, {"c", {"milk", "sand", "paint"}}, {"g", 0}},
               {{"q", "Tom put on his coat because it was very"}, {"c", {"cold", "happy", "round"}}, {"g", 0}}}},
             {"doc_to_text", "q"},
             {"doc_to_choice", "c"},
             {"doc_to_target", "g"}};
  json roll = {{"name", "roll"},
               {"output_type", "loglikelihood_rolling"},
               {"docs",
                {{{"t", "Once upon a time, there was a little girl named Lily. She loved to play outside."}},
                 {{"t", "Tom had a small dog named Max. Max liked to run and jump in the garden."}}}},
               {"doc_to_target", "t"}};
  json gen = gen_task("gen", {"Once upon a time", "Tom had a red ball", "Lily went to the park. She saw a"}, 12,
                      {"."});
  json tasks = json::array();
  if (generation_first) tasks.push_back(gen);
  tasks.push_back(mc);
  tasks.push_back(roll);
  if (!generation_first) tasks.push_back(gen);
  return {{"batch_size", batch_size}, {"max_length", 32}, {"tasks", tasks}};
}

/// Outcome of the request (task name, doc, index) in `r`.
const RequestOutcome& outcome(const EvalSpec& s, const RunResult& r, const std::string& task, int doc, int index = -1) {
  for (size_t i = 0; i < r.requests.size(); ++i) {
    const Request& q = r.requests[i];
    if (s.tasks[static_cast<size_t>(q.task)].name == task && q.doc == doc && q.index == index) return r.outcomes[i];
  }
  FAIL("no request " << task << " " << doc << " " << index);
  static RequestOutcome none;
  return none;
}

size_t phase_index(const RunResult& r, const std::string& name) {
  for (size_t i = 0; i < r.phases.size(); ++i)
    if (r.phases[i].name == name) return i;
  return r.phases.size();
}

}  // namespace

TEST_SUITE("eval.runner") {
  TEST_CASE("reference loglikelihood and rolling values through the runner (2e-5)" * kveval::test::needs_model()) {
    const json& lls = kveval::test::reference_cases("loglikelihood");
    const json& rr = kveval::test::reference_cases("rolling")[0];
    for (int bs : {1, 8}) {
      EvalSpec s = spec_of(reference_spec(bs));
      RunResult r = run_eval(s, real_context());
      CHECK(r.n_request_errors == 0);
      for (size_t i = 0; i < lls.size(); ++i) {
        const json& c = lls[i];
        const RequestOutcome& o = outcome(s, r, "ref_ll", static_cast<int>(i));
        CHECK(std::abs(o.logprob - c["logprob"].get<double>()) < kRefTol);
        CHECK(o.is_greedy == c["is_greedy"].get<bool>());
        CHECK(o.tokens == c["n_continuation_tokens"].get<int>());
        const Request& q = r.requests[static_cast<size_t>(&o - r.outcomes.data())];
        CHECK(q.n_context_tokens == c["n_context_tokens"].get<int>());
      }
      const RequestOutcome& o = outcome(s, r, "ref_roll", 0, 0);
      CHECK(std::abs(o.logprob - rr["sum_logprob"].get<double>()) < kRefTol);
      CHECK(o.tokens == rr["n_tokens_scored"].get<int>());
    }
  }

  TEST_CASE("rolling: windows smaller than the document score N-1 tokens; a window >= N equals one pass" * kveval::test::needs_model()) {
    const json& rr = kveval::test::reference_cases("rolling")[0];
    const std::vector<double> lp = rr["token_logprobs"].get<std::vector<double>>();
    const int n = static_cast<int>(lp.size()) + 1;  // tokens incl. BOS
    for (int w : {8, 13, n, n + 5}) {
      json j = {{"max_length", w},
                {"batch_size", 4},
                {"tasks", {{{"name", "r"}, {"output_type", "loglikelihood_rolling"}, {"docs", {{{"t", rr["text"]}}}},
                            {"doc_to_target", "t"}}}}};
      EvalSpec s = spec_of(j);
      RunResult r = run_eval(s, real_context());
      REQUIRE(r.docs[0][0].ok);
      CHECK(r.docs[0][0].tokens == n - 1);
      if (w >= n) {
        CHECK(r.requests.size() == 1);
        CHECK(std::abs(r.docs[0][0].logprob - rr["sum_logprob"].get<double>()) < kRefTol);
      } else {
        CHECK(r.requests.size() > 1);
        // the first window sees the same context as the one-pass reference
        double first = 0;
        for (int k = 0; k < w - 1; ++k) first += lp[static_cast<size_t>(k)];
        CHECK(std::abs(r.outcomes[0].logprob - first) < kRefTol);
      }
    }
    // window >= N vs one pass of the engine, within 1e-5
    json one = {{"tasks", {{{"name", "r"}, {"output_type", "loglikelihood_rolling"}, {"docs", {{{"t", rr["text"]}}}},
                            {"doc_to_target", "t"}}}}};
    one["max_length"] = n;
    RunResult a = run_eval(spec_of(one), real_context());
    one["max_length"] = 2 * n;
    RunResult b = run_eval(spec_of(one), real_context());
    CHECK(std::abs(a.docs[0][0].logprob - b.docs[0][0].logprob) < 1e-5);
  }

  TEST_CASE("the log-likelihood phase runs cache-free before generation; cache bytes 0 before and after" * kveval::test::needs_model()) {
    EvalSpec s = spec_of(mixed_spec(4, true));
    uint64_t setup_before = real_context().stats().forward_with_cache_setup;
    RunResult r = run_eval(s, real_context());
    CHECK(r.ll_forward_calls > 0);
    CHECK(r.ll_forward_with_cache_setup == 0);
    CHECK(r.ll_forward_cached == 0);
    CHECK(phase_index(r, "loglikelihood") < phase_index(r, "cache setup"));
    CHECK(phase_index(r, "cache setup") < phase_index(r, "prefill"));
    CHECK(phase_index(r, "decode") < phase_index(r, "cache teardown"));
    CHECK(r.cache_bytes_before == 0);
    CHECK(r.cache_bytes_setup > 0);
    CHECK(r.cache_bytes_setup == real_context().cache_bytes_for(r.cache_rows, r.cache_positions));
    CHECK(r.cache_rows == 3);  // min(batch_size 4, 3 prompts)
    CHECK(r.cache_positions <= 32);
    CHECK(r.cache_bytes_after == 0);
    CHECK(real_context().bytes() == 0);
    CHECK(!real_context().caches_are_setup());
    CHECK(real_context().stats().forward_with_cache_setup > setup_before);  // generation did use the cache
  }

  TEST_CASE("a request that throws inside the generation scope leaves no cache behind" * kveval::test::needs_model()) {
    EvalSpec s = spec_of(mixed_spec(1, true));
    RunOptions o;
    size_t calls = 0;
    o.before_generation_batch = [&](size_t b) {
      ++calls;
      CHECK(real_context().bytes() > 0);
      if (b == 1) throw CacheError("test: injected failure in generation batch 1");
    };
    CHECK_THROWS_WITH_AS(run_eval(s, real_context(), o), "test: injected failure in generation batch 1", CacheError);
    CHECK(calls == 2);
    CHECK(real_context().bytes() == 0);
    CHECK(!real_context().caches_are_setup());
    // and the model is usable again
    RunResult r = run_eval(s, real_context());
    CHECK(r.n_request_errors == 0);
  }

  TEST_CASE("--cache-policy reuse keeps the allocation after the run and gives the same results" * kveval::test::needs_model()) {
    EvalSpec s = spec_of(mixed_spec(4, true));
    RunResult released = run_eval(s, real_context());
    RunOptions o;
    o.cache_policy = CachePolicy::Reuse;
    RunResult kept = run_eval(s, real_context(), o);
    CHECK(kept.cache_bytes_setup == released.cache_bytes_setup);
    CHECK(kept.cache_bytes_after == kept.cache_bytes_setup);  // allocation kept, only rewound
    CHECK(real_context().caches_are_setup());
    CHECK_FALSE(real_context().caches_are_enabled());
    REQUIRE(kept.outcomes.size() == released.outcomes.size());
    for (size_t i = 0; i < kept.outcomes.size(); ++i) {
      CHECK(kept.outcomes[i].logprob == released.outcomes[i].logprob);
      CHECK(kept.outcomes[i].output == released.outcomes[i].output);
    }
    real_context().delete_caches();
    CHECK(real_context().bytes() == 0);
  }

  TEST_CASE("bit-identical across runs, spec orders and batch 1 vs 8 (batch-invariant scoring)" * kveval::test::needs_model()) {
    EvalSpec first = spec_of(mixed_spec(8, true)), last = spec_of(mixed_spec(8, false)), one = spec_of(mixed_spec(1, true));
    RunResult a = run_eval(first, real_context());
    RunResult b = run_eval(first, real_context());
    RunResult c = run_eval(last, real_context());
    RunResult d = run_eval(one, real_context());
    for (const auto& [task, doc, idx] : std::vector<std::tuple<std::string, int, int>>{
             {"mc", 0, 0}, {"mc", 0, 3}, {"mc", 1, 1}, {"mc", 2, 2}, {"roll", 0, 0}, {"roll", 1, 0}, {"roll", 1, 1}}) {
      const auto& oa = outcome(first, a, task, doc, idx);
      CHECK(oa.logprob == outcome(first, b, task, doc, idx).logprob);
      CHECK(oa.logprob == outcome(last, c, task, doc, idx).logprob);
      CHECK(oa.logprob == outcome(one, d, task, doc, idx).logprob);  // batch-invariant matmuls
      CHECK(oa.is_greedy == outcome(one, d, task, doc, idx).is_greedy);
    }
    for (int doc = 0; doc < 3; ++doc) {
      const auto& ga = outcome(first, a, "gen", doc);
      CHECK(ga.output_ids == outcome(first, b, "gen", doc).output_ids);
      CHECK(ga.output_ids == outcome(last, c, "gen", doc).output_ids);
      CHECK(ga.output_ids == outcome(one, d, "gen", doc).output_ids);
      CHECK(ga.output == outcome(one, d, "gen", doc).output);
    }
    // metrics and multiple-choice decisions
    auto metric = [](const EvalSpec& s, const RunResult& r, const std::string& task, const std::string& m) {
      for (size_t t = 0; t < s.tasks.size(); ++t)
        if (s.tasks[t].name == task)
          for (const auto& v : r.metrics[t])
            if (v.name == m) return *v.value;
      return -1.0;
    };
    for (const char* m : {"acc", "acc_norm"}) {
      CHECK(metric(first, a, "mc", m) == metric(last, c, "mc", m));
      CHECK(metric(first, a, "mc", m) == metric(one, d, "mc", m));
    }
    CHECK(metric(first, a, "roll", "word_perplexity") == metric(last, c, "roll", "word_perplexity"));
    // the results documents agree except for timings
    nlohmann::ordered_json ja = results_json(first, a, ""), jc = results_json(last, c, "");
    // the same values (task order follows the spec, so compare as unordered objects)
    auto unordered = [](const nlohmann::ordered_json& j) { return json::parse(j.dump()); };
    CHECK(unordered(ja["results"]) == unordered(jc["results"]));
    CHECK(unordered(ja["results"]) == unordered(results_json(one, d, "")["results"]));
  }

  TEST_CASE("greedy generation reproduces the reference text" * kveval::test::needs_model()) {
    for (const auto& g : kveval::test::reference_cases("greedy")) {
      if (g["prompt"].get<std::string>().empty()) continue;  // an empty prompt is not a spec document case
      int n = g["max_gen_toks"].get<int>();
      EvalSpec s = spec_of({{"max_length", 128}, {"tasks", {gen_task("g", {g["prompt"].get<std::string>()}, n)}}});
      RunResult r = run_eval(s, real_context());
      const auto& o = r.outcomes[0];
      std::vector<int32_t> ids = g["ids"].get<std::vector<int32_t>>();
      // EOS stops kveval, not the reference: compare up to our length
      REQUIRE(o.output_ids.size() <= ids.size());
      CHECK(std::equal(o.output_ids.begin(), o.output_ids.end(), ids.begin()));
      if (o.stop_reason == "max_gen_toks") CHECK(o.output == g["text"].get<std::string>());
    }
  }

  TEST_CASE("max_gen_toks 0, 1, 2, 7 give exactly that many tokens; 0 runs no forward pass" * kveval::test::needs_model()) {
    json tasks = json::array();
    for (int k : {0, 1, 2, 7}) tasks.push_back(gen_task("g" + std::to_string(k), {"Once upon a time"}, k));
    EvalSpec s = spec_of({{"batch_size", 4}, {"max_length", 64}, {"tasks", tasks}});
    RunResult r = run_eval(s, real_context());
    for (size_t t = 0; t < 4; ++t) {
      int k = s.tasks[t].generation_kwargs.max_gen_toks;
      const auto& o = outcome(s, r, s.tasks[t].name, 0);
      CHECK(o.tokens == k);
      CHECK(o.output_ids.size() == static_cast<size_t>(k));
      CHECK(o.stop_reason == "max_gen_toks");
    }
    CHECK(r.cache_rows == 3);  // the max_gen_toks 0 request takes no row
    uint64_t before = real_context().stats().forward_calls;
    EvalSpec z = spec_of({{"max_length", 64}, {"tasks", {gen_task("z", {"Once upon a time", "Tom"}, 0)}}});
    RunResult rz = run_eval(z, real_context());
    CHECK(real_context().stats().forward_calls == before);
    CHECK(rz.cache_bytes_setup == 0);
    CHECK(rz.outcomes[0].output.empty());
  }

  TEST_CASE("stop strings: a stop spanning two tokens cuts before it; each task keeps its own until" * kveval::test::needs_model()) {
    // the unstopped continuation and its token boundaries
    EvalSpec free = spec_of({{"max_length", 64}, {"tasks", {gen_task("free", {"Once upon a time"}, 16)}}});
    RunResult rf = run_eval(free, real_context());
    const auto& of = rf.outcomes[0];
    REQUIRE(of.output_ids.size() == 16);
    const Tokenizer& tok = real_context().model().tokenizer();
    std::string text;
    std::string stop;
    size_t stop_at = 0;
    for (size_t k = 0; k + 1 < of.output_ids.size() && stop.empty(); ++k) {
      std::string piece = tok.token_to_piece(of.output_ids[k]), next = tok.token_to_piece(of.output_ids[k + 1]);
      text += piece;
      // last 2 bytes of token k + first 2 bytes of token k+1, first occurring there
      if (piece.size() >= 2 && next.size() >= 2 && k >= 2) {
        std::string cand = piece.substr(piece.size() - 2) + next.substr(0, 2);
        if (of.output.find(cand) == text.size() - 2) stop = cand, stop_at = text.size() - 2;
      }
    }
    REQUIRE(!stop.empty());
    MESSAGE("stop string spanning two tokens: '" << stop << "' in '" << of.output << "'");
    // two tasks, same prompt, one batch, different stop lists
    EvalSpec s = spec_of({{"batch_size", 8},
                          {"max_length", 64},
                          {"tasks",
                           {gen_task("span", {"Once upon a time"}, 16, {stop}),
                            gen_task("was", {"Once upon a time"}, 16, {"was"})}}});
    RunResult r = run_eval(s, real_context());
    CHECK(r.cache_rows == 2);  // both rows in one batch
    const auto& a = outcome(s, r, "span", 0);
    const auto& b = outcome(s, r, "was", 0);
    CHECK(a.output == of.output.substr(0, stop_at));
    CHECK(a.stop_reason == "until");
    CHECK(b.output == of.output.substr(0, of.output.find("was")));
    CHECK(b.stop_reason == "until");
    CHECK(a.output != b.output);
  }

  TEST_CASE("long prompts are left-truncated with a warning; max_gen_toks >= max_length is a SpecError" * kveval::test::needs_model()) {
    std::string prompt = kveval::test::reference_cases("rolling")[0]["text"];
    EvalSpec s = spec_of({{"max_length", 16}, {"tasks", {gen_task("g", {prompt}, 4)}}});
    RunResult r = run_eval(s, real_context());
    CHECK(r.requests[0].prompt.size() == 12);
    CHECK(r.requests[0].truncated_tokens > 0);
    CHECK(r.outcomes[0].tokens == 4);
    REQUIRE(r.warnings.size() == 1);
    CHECK(r.cache_positions == 16);
    EvalSpec bad = spec_of({{"tasks", {gen_task("g", {"Hi"}, 4096)}}});  // default max_length = context_length (2048)
    CHECK_THROWS_AS(run_eval(bad, real_context()), SpecError);
    CHECK_THROWS_AS(run_eval(spec_of({{"max_length", 100000}, {"tasks", {gen_task("g", {"Hi"}, 1)}}}), real_context()), SpecError);
    CHECK(real_context().bytes() == 0);
  }

  TEST_CASE("empty continuation and empty rolling document are per-request errors; metrics stay finite" * kveval::test::needs_model()) {
    json j = {{"tasks",
               {{{"name", "ll"}, {"output_type", "loglikelihood"}, {"target_delimiter", ""},
                 {"docs", {{{"c", "Lily went to the"}, {"x", ""}}, {{"c", "Lily went to the"}, {"x", " park"}}}},
                 {"doc_to_text", "c"}, {"doc_to_target", "x"}},
                {{"name", "roll"}, {"output_type", "loglikelihood_rolling"}, {"docs", {{{"t", ""}}}}, {"doc_to_target", "t"}}}}};
    EvalSpec s = spec_of(j);
    RunResult r = run_eval(s, real_context());
    CHECK(r.n_request_errors == 2);
    CHECK(r.task_errors == std::vector<int>{1, 1});
    CHECK(r.metrics[0][0].n == 1);
    for (const auto& ms : r.metrics)
      for (const auto& m : ms) {
        if (m.value) CHECK(std::isfinite(*m.value));
        if (m.stderr_) CHECK(std::isfinite(*m.stderr_));
      }
    CHECK(!r.metrics[1][0].value.has_value());
    std::string table = format_metrics_table(s, r);
    CHECK(table.find("nan") == std::string::npos);
    CHECK(table.find("2 requests failed") != std::string::npos);
    CHECK(table.find("empty document") != std::string::npos);
    nlohmann::ordered_json res = results_json(s, r, "");
    CHECK(res["kveval"]["request_errors"]["total"] == 2);
    CHECK(res["results"]["roll"]["word_perplexity,none"].is_null());
    CHECK(res["results"]["roll"]["word_perplexity_stderr,none"] == "N/A");
  }

  TEST_CASE("a task whose requests all fail says so in its notes (not \"no documents\")" * kveval::test::needs_model()) {
    json j = {{"max_length", 2},
              {"tasks",
               {{{"name", "ll"}, {"output_type", "loglikelihood"},
                 {"docs", {{{"c", "Lily went to the"}, {"x", "park"}}, {{"c", "Tom saw a"}, {"x", "dog"}}}},
                 {"doc_to_text", "c"}, {"doc_to_target", "x"}}}}};
    EvalSpec s = spec_of(j);
    RunResult r = run_eval(s, real_context());
    REQUIRE(r.n_request_errors == 2);
    REQUIRE(r.metrics[0].size() == 2);
    for (const auto& m : r.metrics[0]) {
      CHECK(!m.value.has_value());
      CHECK(m.note == "all 2 requests failed");
    }
    CHECK(format_metrics_table(s, r).find("no documents") == std::string::npos);
  }
}
