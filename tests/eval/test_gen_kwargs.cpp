// generation_kwargs with sampling, `repeats`, lm-eval's selection filters
// (take_first, take_first_k, majority_vote) and --gen-kwargs: bad values refused
// in one line before any model loads; majority votes against hand-counted ones;
// on stories260K, sampled runs identical for batch sizes 1/3/8 and both
// schedules, and the majority_vote metric equal to the votes counted here.
#include <doctest/doctest.h>

#include <map>

#include "context_support.hpp"
#include "eval/filters.hpp"
#include "eval/lm_eval_format.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using kveval::test::spec_error;
using nlohmann::json;

namespace {

/// A generate_until task over two inline documents with `extra` keys merged in.
json gen_spec(const json& extra) {
  json t = {{"name", "g"}, {"output_type", "generate_until"}, {"docs", json::array({{{"p", "x"}}, {{"p", "y"}}})},
            {"doc_to_text", "p"}};
  if (extra.is_object()) t.update(extra);
  return {{"model", "m.gguf"}, {"tasks", json::array({t})}};
}

std::string spec_err(const json& extra) {
  return spec_error([&] { parse_spec(gen_spec(extra), "s.json", "."); });
}

FilterPipeline pipe(std::vector<FilterStep> steps) { return FilterPipeline{"p", std::move(steps)}; }

}  // namespace

TEST_SUITE("eval.gen_kwargs") {
  TEST_CASE("sampling keys are read; greedy and HF's defaults otherwise; seed defaults to the spec's") {
    EvalSpec s = parse_spec(gen_spec({{"generation_kwargs", {{"do_sample", true}, {"temperature", 0.2}, {"top_k", 7},
                                                             {"top_p", 0.9}, {"min_p", 0.05}, {"seed", 99}}},
                                      {"repeats", 4}}),
                            "s.json", ".");
    const SamplingParams& p = s.tasks[0].generation_kwargs.sampling;
    CHECK(p.do_sample);
    CHECK(p.temperature == 0.2);
    CHECK(p.top_k == 7);
    CHECK(p.top_p == 0.9);
    CHECK(p.min_p == 0.05);
    CHECK(p.seed == 99);
    CHECK(s.tasks[0].repeats == 4);
    json j = gen_spec({});
    j["seed"] = 5;
    EvalSpec d = parse_spec(j, "s.json", ".");
    const SamplingParams& q = d.tasks[0].generation_kwargs.sampling;
    CHECK_FALSE(q.do_sample);
    CHECK(q.greedy());
    CHECK(q.top_k == 50);
    CHECK(q.top_p == 1.0);
    CHECK(q.seed == 5);
    CHECK(d.tasks[0].repeats == 1);
    // lm-eval's greedy spelling is accepted
    CHECK(parse_spec(gen_spec({{"generation_kwargs", {{"do_sample", false}, {"temperature", 0}}}}), "s.json", ".")
              .tasks[0].generation_kwargs.sampling.greedy());
  }

  TEST_CASE("out-of-range values: one line naming the key") {
    CHECK(spec_err({{"generation_kwargs", {{"top_p", 0}}}}) == "s.json: tasks[0].generation_kwargs.top_p: 0 is outside (0, 1]");
    CHECK(spec_err({{"generation_kwargs", {{"top_p", 1.5}}}}) == "s.json: tasks[0].generation_kwargs.top_p: 1.5 is outside (0, 1]");
    CHECK(spec_err({{"generation_kwargs", {{"temperature", -0.5}}}}) ==
          "s.json: tasks[0].generation_kwargs.temperature: -0.5 is outside [0, inf) (temperature must be >= 0)");
    CHECK(spec_err({{"generation_kwargs", {{"top_k", -1}}}}) ==
          "s.json: tasks[0].generation_kwargs.top_k: expected an integer in [0, 1073741824], got -1");
    CHECK(spec_err({{"generation_kwargs", {{"min_p", 1.01}}}}) == "s.json: tasks[0].generation_kwargs.min_p: 1.01 is outside [0, 1]");
    CHECK(spec_err({{"generation_kwargs", {{"do_sample", "yes"}}}}) ==
          "s.json: tasks[0].generation_kwargs.do_sample: expected a boolean, got \"yes\"");
    CHECK(spec_err({{"generation_kwargs", {{"seed", -3}}}}) ==
          "s.json: tasks[0].generation_kwargs.seed: expected a non-negative integer, got -3");
    CHECK(spec_err({{"generation_kwargs", {{"top_q", 1}}}}) ==
          "s.json: tasks[0].generation_kwargs.top_q: unknown key (did you mean 'top_k'?)");
    CHECK(spec_err({{"repeats", 0}}) == "s.json: tasks[0].repeats: expected an integer in [1, 65536], got 0");
    CHECK(spec_err({{"filter_list", json::array({{{"name", "f"}, {"filter", json::array({{{"function", "take_first_k"}}})}}})}}) ==
          "s.json: tasks[0].filter_list[0].filter[0]: take_first_k needs 'k' (responses to keep)");
    json ll = {{"model", "m"}, {"tasks", json::array({{{"name", "l"}, {"output_type", "loglikelihood"},
                                                        {"docs", json::array({{{"q", "a"}}})}, {"doc_to_text", "q"},
                                                        {"doc_to_target", "q"}, {"repeats", 2}}})}};
    CHECK(spec_error([&] { parse_spec(ll, "s.json", "."); }) ==
          "s.json: tasks[0].repeats: only generate_until tasks take repeats > 1 (this task is loglikelihood)");
  }

  TEST_CASE("YAML: repeats and sampling keys are read, bad ones named at file:line") {
    kveval::test::TempDir d;
    d.write("d.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n");
    auto load = [&](const std::string& tail) {
      d.write("t.yaml", std::string(kveval::test::kYamlTaskHead) + tail +
                            "dataset_kwargs:\n  data_files:\n    test: d.jsonl\ntest_split: test\n");
      json j = {{"model", "m"}, {"tasks", json::array({{{"lm_eval_yaml", "t.yaml"}}})}};
      return parse_spec(j, "spec.json", d.path.string());
    };
    EvalSpec s = load("  do_sample: true\n  temperature: 0.2\nrepeats: 3\n");
    CHECK(s.tasks[0].repeats == 3);
    CHECK(s.tasks[0].generation_kwargs.sampling.do_sample);
    CHECK(spec_error([&] { load("repeats: 0\n"); }) == d.file("t.yaml") + ":8: repeats: expected an integer in [1, 65536], got 0");
    CHECK(spec_error([&] { load("  top_p: 2\n"); }) == d.file("t.yaml") + ":6: generation_kwargs.top_p: 2 is outside (0, 1]");
  }

  TEST_CASE("--gen-kwargs: lm-eval's key=value list or JSON, checked as generation_kwargs") {
    const json j = parse_gen_kwargs_arg("do_sample=True,temperature=0.2,top_k=10,until=Q");
    CHECK(j == json{{"do_sample", true}, {"temperature", 0.2}, {"top_k", 10}, {"until", "Q"}});
    CHECK(parse_gen_kwargs_arg(R"({"top_p": 0.5})") == json{{"top_p", 0.5}});
    CHECK(spec_error([] { parse_gen_kwargs_arg("temperature"); }) ==
          "--gen-kwargs: 'temperature': expected key=value");
    TaskOverrides o;
    o.gen_kwargs = parse_gen_kwargs_arg("do_sample=true,top_p=0.5,seed=3");
    EvalSpec s = parse_spec(gen_spec({{"generation_kwargs", {{"top_p", 0.9}, {"max_gen_toks", 4}}}}), "s.json", ".", "", o);
    CHECK(s.tasks[0].generation_kwargs.sampling.top_p == 0.5);
    CHECK(s.tasks[0].generation_kwargs.sampling.seed == 3);
    CHECK(s.tasks[0].generation_kwargs.max_gen_toks == 4);
    o.gen_kwargs = parse_gen_kwargs_arg("top_p=2");
    CHECK(spec_error([&] { parse_spec(gen_spec({}), "s.json", ".", "", o); }) == "--gen-kwargs: top_p: 2 is outside (0, 1]");
  }

  TEST_CASE("selection filters on a document's repeats, as lm-eval's filters/selection.py") {
    const std::vector<std::string> r = {"b", "a", "b", "a", "c"};
    FilterStep first{.function = "take_first"}, vote{.function = "majority_vote"}, k3{.function = "take_first_k", .k = 3};
    FilterStep lower{.function = "lowercase"};
    // Counter(["b","a","b","a","c"]).most_common(1) -> ("b", 2): a tie goes to the first seen
    auto f = apply_filter_pipeline(pipe({vote}), r);
    CHECK(f.is_list);
    CHECK(f.items == std::vector<std::string>{"b"});
    f = apply_filter_pipeline(pipe({vote, first}), r);
    CHECK_FALSE(f.is_list);
    CHECK(f.items == std::vector<std::string>{"b"});
    CHECK(apply_filter_pipeline(pipe({vote, first}), {"a", "c", "c", "b", "a", "c"}).items == std::vector<std::string>{"c"});
    f = apply_filter_pipeline(pipe({k3}), r);
    CHECK(f.items == std::vector<std::string>{"b", "a", "b"});
    f = apply_filter_pipeline(pipe({k3, vote, first}), {"x", "y", "y", "x", "x"});  // first 3: x y y -> y
    CHECK(f.items == std::vector<std::string>{"y"});
    f = apply_filter_pipeline(pipe(std::vector<FilterStep>{}), r);  // "none": take_first
    CHECK_FALSE(f.is_list);
    CHECK(f.items == std::vector<std::string>{"b"});
    f = apply_filter_pipeline(pipe({lower, vote, first}), {"A", "b", "a"});  // lowercase maps first: a wins 2 to 1
    CHECK(f.items == std::vector<std::string>{"a"});
    Doc d;
    d.has_target = true;
    d.target = "b";
    CHECK(exact_match_value({}, apply_filter_pipeline(pipe({k3}), r), d) == doctest::Approx(2.0 / 3));
    CHECK(exact_match_value({}, apply_filter_pipeline(pipe({vote, first}), r), d) == 1.0);
  }
}

namespace {

/// Two generate_until tasks sampled with repeats: "vote" (5 repeats of 2
/// tokens, targets `targets`, a majority_vote pipeline and lm-eval's default)
/// and "plain" (1 repeat).
EvalSpec sampled_spec(int batch_size, const std::vector<std::string>& targets = {"", "", ""}) {
  json vote = kveval::test::gen_task("vote", {"Once upon a time", "Tom had a", "The sun"}, 2, {"."});
  for (size_t i = 0; i < 3; ++i) vote["docs"][i]["a"] = targets[i];
  vote["generation_kwargs"].update({{"do_sample", true}, {"temperature", 1.0}, {"top_k", 3}, {"seed", 21}});
  vote["repeats"] = 5;
  vote["doc_to_target"] = "a";
  vote["filter_list"] = json::array({{{"name", "maj"}, {"filter", json::array({{{"function", "majority_vote"}}, {{"function", "take_first"}}})}}});
  json plain = kveval::test::gen_task("plain", {"Lily", "One day", "Max", "The bird"}, 20, {"\n"});
  plain["generation_kwargs"].update({{"do_sample", true}, {"top_p", 0.9}, {"min_p", 0.02}});
  json j = {{"batch_size", batch_size}, {"max_length", 128}, {"tasks", json::array({vote, plain})}};
  j["model"] = kveval::test::model_path();
  return parse_spec(j, "test.json", ".");
}

}  // namespace

TEST_SUITE("eval.gen_kwargs") {
  TEST_CASE("stories260K: sampled runs equal for batch sizes 1, 3, 8 and both schedules; majority votes hand-counted" *
            kveval::test::needs_model()) {
    RunOptions o;
    o.batching = Batching::Static;
    const EvalSpec spec1 = sampled_spec(1);
    const RunResult ref = run_eval(spec1, kveval::test::real_context(), o);
    REQUIRE(ref.n_request_errors == 0);
    for (int bs : {1, 3, 8})
      for (Batching b : {Batching::Static, Batching::Dynamic}) {
        CAPTURE(bs);
        o.batching = b;
        const RunResult got = run_eval(sampled_spec(bs), kveval::test::real_context(), o);
        REQUIRE(got.outcomes.size() == ref.outcomes.size());
        for (size_t i = 0; i < got.outcomes.size(); ++i) {
          CAPTURE(i);
          CHECK(got.outcomes[i].output_ids == ref.outcomes[i].output_ids);
        }
      }
    // the repeats of a document differ, and the vote is the hand-counted one
    const TaskSpec& t = spec1.tasks[0];
    int differing = 0;
    std::vector<std::string> votes;
    const auto samples = sample_records(spec1, ref);
    for (size_t di = 0; di < t.docs.size(); ++di) {
      std::vector<std::string> outs;
      for (size_t i = 0; i < ref.requests.size(); ++i)
        if (ref.requests[i].task == 0 && ref.requests[i].doc == static_cast<int>(di)) outs.push_back(ref.outcomes[i].output);
      REQUIRE(outs.size() == 5);
      CHECK(ref.docs[0][di].outputs == outs);
      std::map<std::string, int> n;
      for (const auto& s : outs) ++n[s];
      differing += n.size() > 1;
      std::string want = outs[0];  // most common, ties to the first seen
      for (const auto& s : outs)
        if (n[s] > n[want]) want = s;
      votes.push_back(want);
      for (const auto& sj : samples)
        if (sj["task"] == "vote" && sj["doc_id"] == di && sj["filter"] == "maj") {
          CHECK(sj["filtered_resps"][0] == want);
          CHECK(sj["resps"][0].size() == 5);
        }
    }
    CHECK(differing >= 2);
    // the same draws (batch size 3) with the votes of docs 0 and 2 as targets: exact_match,maj = 2/3
    const EvalSpec spec2 = sampled_spec(3, {votes[0], votes[1] + "#", votes[2]});
    const RunResult again = run_eval(spec2, kveval::test::real_context(), o);
    int found = 0;
    for (const auto& m : again.metrics[0]) {
      if (m.name == "exact_match" && m.filter == "maj") CHECK(m.value.value() == doctest::Approx(2.0 / 3));
      if (m.name == "exact_match" && m.filter == "maj") ++found;
    }
    CHECK(found == 1);
  }
}
