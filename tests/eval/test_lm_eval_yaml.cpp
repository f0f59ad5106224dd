// lm-eval task YAMLs (tasks/lm_eval/): five fixtures written in lm-eval's
// syntax render byte for byte as written here by hand; YAML-level errors name
// file:line and the key.
#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include <cmath>

#include "eval/eval_test_util.hpp"
#include "eval/lm_eval_yaml.hpp"
#include "eval/spec.hpp"
#include "util/error.hpp"

using kveval::eval::EvalSpec;
using kveval::eval::load_spec;
using kveval::eval::parse_spec;
using kveval::eval::TaskSpec;
using kveval::test::TempDir;
using nlohmann::json;

namespace {

std::string fixtures() {
  const char* s = std::getenv("KVEVAL_SOURCE_DIR");
  return std::string(s ? s : ".") + "/tasks/lm_eval";
}

EvalSpec load_fixture(const std::string& yaml) {
  json j = {{"model", "m.gguf"}, {"tasks", json::array({{{"lm_eval_yaml", yaml}}})}};
  return parse_spec(j, "spec.json", fixtures());
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kveval::SpecError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_SUITE("eval.lm_eval_yaml") {
  TEST_CASE("plain scalars resolve as PyYAML's safe_load does (YAML 1.1)") {
    // Each expected value is what Debian's python3-yaml 6.0 yaml.safe_load gives for the same text.
    TempDir d;
    d.write("t.yaml",
            "task: t\noutput_type: loglikelihood\ndoc_to_text: q\ndoc_to_target: a\ngeneration_kwargs:\n"
            "  n1: ~\n  n2: null\n  n3: NULL\n  n4:\n  b1: yes\n  b2: On\n  b3: TRUE\n  b4: no\n  b5: off\n  b6: False\n"
            "  i1: 42\n  i2: -1_000\n  i3: +0\n  i4: 0x1F\n  i5: -0x_ff\n  i6: 017\n  i7: 0_17\n"
            "  f1: 1.5\n  f2: 1.5e+3\n  f3: 6.\n  f4: 1_0.2_5\n  f5: -.inf\n"
            "  s1: 1e3\n  s2: YES!\n  s3: nO\n  s4: 0o17\n  s5: 09\n  s6: .\n  s7: '42'\n");
    const json g = kveval::eval::load_lm_eval_yaml(d.file("t.yaml"), {{"dataset_path", d.write("d.jsonl", "{}\n")}})
                       .task.at("generation_kwargs");
    for (const char* k : {"n1", "n2", "n3", "n4"}) CHECK_MESSAGE(g.at(k).is_null(), k);
    for (const char* k : {"b1", "b2", "b3"}) CHECK_MESSAGE(g.at(k) == json(true), k);
    for (const char* k : {"b4", "b5", "b6"}) CHECK_MESSAGE(g.at(k) == json(false), k);
    CHECK(g.at("i1") == json(42));
    CHECK(g.at("i2") == json(-1000));
    CHECK(g.at("i3") == json(0));
    CHECK(g.at("i4") == json(31));
    CHECK(g.at("i5") == json(-255));
    CHECK(g.at("i6") == json(15));
    CHECK(g.at("i7") == json(15));
    CHECK(g.at("i1").is_number_integer());
    CHECK(g.at("f1") == json(1.5));
    CHECK(g.at("f2") == json(1500.0));
    CHECK(g.at("f2").is_number_float());
    CHECK(g.at("f3") == json(6.0));
    CHECK(g.at("f3").is_number_float());
    CHECK(g.at("f4") == json(10.25));
    CHECK(g.at("f5").get<double>() == -INFINITY);
    CHECK(g.at("s1") == json("1e3"));
    CHECK(g.at("s2") == json("YES!"));
    CHECK(g.at("s3") == json("nO"));
    CHECK(g.at("s4") == json("0o17"));
    CHECK(g.at("s5") == json("09"));
    CHECK(g.at("s6") == json("."));
    CHECK(g.at("s7") == json("42"));
  }

  TEST_CASE("ARC-style: include, choices.text, choices.label.index(answerKey)") {
    EvalSpec s = load_fixture("arc_mini.yaml");
    const TaskSpec& t = s.tasks[0];
    CHECK(t.name == "arc_mini");
    CHECK(t.metric_list == std::vector<std::string>{"acc", "acc_norm"});
    REQUIRE(t.version);
    CHECK(*t.version == 1.0);
    REQUIRE(t.docs.size() == 5);
    CHECK(t.docs[0].context == "Question: Which animal says moo?\nAnswer:");
    CHECK(t.docs[0].choices == std::vector<std::string>{"a cow", "a cat", "a fish", "a bird"});
    CHECK(t.docs[1].context == "Question: What do you use to cut paper?\nAnswer:");
    CHECK(t.docs[1].choices == std::vector<std::string>{"a spoon", "scissors", "a pillow"});
    std::vector<int> gold;
    for (const auto& d : t.docs) gold.push_back(d.gold);
    CHECK(gold == std::vector<int>{0, 1, 2, 0, 3});
    CHECK(t.docs[2].target == "in the east");
  }

  TEST_CASE("LAMBADA-style: text.split(' ')[:-1]|join(' ') and ' '+last word; continuation without delimiter") {
    EvalSpec s = load_fixture("lambada_mini.yaml");
    const TaskSpec& t = s.tasks[0];
    REQUIRE(t.docs.size() == 5);
    const char* ctx[] = {"Lily went to the park with her mom. She played on the swing all", "Tom had a red ball. He threw the ball to his",
                         "The cat was hungry, so she asked her mom for some", "Ben and Sue built a big castle out of",
                         "Once upon a time there was a little bird who could not"};
    const char* tgt[] = {" day", " dog", " milk", " sand", " fly"};
    for (size_t i = 0; i < 5; ++i) {
      CHECK(t.docs[i].context == ctx[i]);
      CHECK(t.docs[i].target == tgt[i]);
    }
    CHECK_FALSE(t.loglikelihood_delimiter);
    CHECK(t.metric_list == std::vector<std::string>{"perplexity", "acc"});
  }

  TEST_CASE("PIQA-style: list literal {{[sol1, sol2]}} read back with literal_eval, quotes intact") {
    EvalSpec s = load_fixture("piqa_mini.yaml");
    const TaskSpec& t = s.tasks[0];
    REQUIRE(t.docs.size() == 5);
    CHECK(t.docs[0].context == "Question: How do you keep a puppy warm at night?\nAnswer:");
    CHECK(t.docs[0].choices == std::vector<std::string>{"Put a soft blanket in the puppy's bed.", "Put the puppy's bed in the snow."});
    CHECK(t.docs[2].context == "Question: To dry your hands after washing them,\nAnswer:");
    CHECK(t.docs[2].choices == std::vector<std::string>{"rub them with a clean towel.", "rub them with \"wet\" mud."});
    std::vector<int> gold;
    for (const auto& d : t.docs) gold.push_back(d.gold);
    CHECK(gold == std::vector<int>{0, 1, 0, 1, 0});
  }

  TEST_CASE("GSM8K-style: generate_until, first_n few-shot from the train split, regex filters, exact_match options") {
    EvalSpec s = load_fixture("gsm8k_mini.yaml");
    const TaskSpec& t = s.tasks[0];
    REQUIRE(t.docs.size() == 5);
    std::string shots =
        "Question: Lily has 2 apples and finds 3 more. How many apples does she have?\nAnswer: She has 2 + 3 = 5 apples.\n#### 5\n\n"
        "Question: Tom had 10 stickers and gave 4 to Sue. How many stickers does Tom have now?\nAnswer: Tom has 10 - 4 = 6 stickers.\n#### 6\n\n";
    CHECK(t.docs[0].context == shots + "Question: Ben has 5 toy cars and gets 2 more. How many toy cars does he have?\nAnswer:");
    CHECK(t.docs[3].context == shots + "Question: A farmer has 1,200 eggs and sells 200. How many eggs are left?\nAnswer:");
    CHECK(t.docs[0].target == "He has 5 + 2 = 7 toy cars.\n#### 7");
    CHECK(t.generation_kwargs.until == std::vector<std::string>{"Question:", "</s>", "<|im_end|>"});
    CHECK(t.generation_kwargs.max_gen_toks == 24);
    CHECK(t.fewshot_sampler == "first_n");
    REQUIRE(t.filter_list.size() == 2);
    CHECK(t.filter_list[0].name == "strict-match");
    CHECK(t.filter_list[0].steps[0].regex_pattern == "#### (\\-?[0-9\\.\\,]+)");
    CHECK(t.filter_list[1].steps[0].group_select == -1);
    CHECK(t.exact_match.ignore_case);
    CHECK(t.exact_match.regexes_to_ignore == std::vector<std::string>{",", "\\$", "(?s).*#### ", "\\.$"});
  }

  TEST_CASE("TruthfulQA-style: {% set %} in a folded YAML string, doc_to_target: 0") {
    EvalSpec s = load_fixture("truthfulqa_mini.yaml");
    const TaskSpec& t = s.tasks[0];
    REQUIRE(t.docs.size() == 5);
    std::string qa = "Q: What do cows drink?\nA: Cows drink water.\n\nQ: Can a cat fly?\nA: No, a cat cannot fly.";
    CHECK(t.docs[0].context == qa + "\n\nQ: What happens if you swallow a seed?\nA:");
    CHECK(t.docs[1].context == qa + "\n\nQ: Is the moon made of cheese?\nA:");
    CHECK(t.docs[1].choices == std::vector<std::string>{"No, the moon is made of rock.", "Yes, it is made of cheese.", "Only on Sundays."});
    for (const auto& d : t.docs) CHECK(d.gold == 0);
    CHECK(t.metric_list == std::vector<std::string>{"acc"});
  }

  TEST_CASE("a YAML file as the whole spec needs --model; the spec entry's dataset_path overrides the YAML's data") {
    std::string yaml = fixtures() + "/arc_mini.yaml";
    CHECK(error_of([&] { load_spec(yaml); }).find("needs --model") != std::string::npos);
    EvalSpec s = load_spec(yaml, "m.gguf");
    CHECK(s.tasks[0].docs.size() == 5);
    TempDir d;
    d.write("two.jsonl", R"({"question": "Q?", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "B"})" "\n");
    json j = {{"model", "m"}, {"tasks", json::array({{{"lm_eval_yaml", fixtures() + "/arc_mini.yaml"}, {"dataset_path", "two.jsonl"}}})}};
    EvalSpec s2 = parse_spec(j, "spec.json", d.path.string());
    REQUIRE(s2.tasks[0].docs.size() == 1);
    CHECK(s2.tasks[0].docs[0].gold == 1);
  }

  TEST_CASE("an include base, a YAML list, a scalar or an empty file where a task YAML is expected: one line saying what it is") {
    const std::string base = fixtures() + "/_arc_base.yaml";  // the keys arc_mini.yaml takes with `include:`, no `task`
    CHECK(error_of([&] { load_fixture("_arc_base.yaml"); }) ==
          base + ": not an lm-eval task: no 'task' key (an include base, whose keys task YAMLs take with `include:`?); "
                 "give a task YAML, one with `task: NAME`");
    CHECK(error_of([&] { load_spec(base, "m.gguf"); }) == error_of([&] { load_fixture("_arc_base.yaml"); }));
    TempDir d;
    const std::string tail = ", not a mapping of task keys (task: NAME, dataset_path: ..., ...)";
    for (const auto& [text, what] : std::vector<std::pair<std::string, std::string>>{
             {"- task: a\n- task: b\n", "it holds a YAML list"},
             {"arc_mini\n", "it holds a single YAML value"},
             {"", "it holds no value (an empty file, or comments only)"},
             {"# a comment\n", "it holds no value (an empty file, or comments only)"}}) {
      CAPTURE(text);
      const std::string y = d.write("t.yaml", text);
      CHECK(error_of([&] { load_spec(y, "m.gguf"); }) == y + ": not an lm-eval task YAML: " + what + tail);
    }
  }

  TEST_CASE("refused keys and YAML errors name file:line and the key") {
    TempDir d;
    auto err = [&](const std::string& yaml) {
      d.write("t.yaml", yaml);
      d.write("d.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n");
      json j = {{"model", "m"}, {"tasks", json::array({{{"lm_eval_yaml", "t.yaml"}, {"dataset_path", "d.jsonl"}}})}};
      return error_of([&] { parse_spec(j, "spec.json", d.path.string()); });
    };
    std::string f = d.file("t.yaml");
    // `!function` imports <module>.py from the YAML's folder (eval.python_hooks runs them)
    const std::string no_utils = d.file("utils.py") + ": not found (lm-eval imports 'utils' from the YAML's folder)";
    CHECK(err("task: t\noutput_type: loglikelihood\ndoc_to_text: !function utils.doc_to_text\n") ==
          f + ":3: doc_to_text: " + no_utils);
    CHECK(err("task: t\nprocess_docs: !function utils.process_docs\n") == f + ":2: process_docs: " + no_utils);
    CHECK(err("task: t\nprocess_docs: x\n") == f + ":2: process_docs: expected '!function module.name', got \"x\"");
    CHECK(err("task: t\noutput_type: loglikelihood\nprocess_results: x\n") ==
          f + ":3: process_results: expected '!function module.name', got \"x\"");
    CHECK(err("task: t\nfilter_list: [{name: a, filter: [{function: !function utils.f}]}]\n") ==
          f + ":2: filter_list[0].filter[0].function: " + no_utils);  // a custom filter (eval.filter_hooks)
    CHECK(err("task: t\ngeneration_kwargs: {until: !function utils.f}\n") ==
          f + ":2: generation_kwargs.until: '!function' is not supported here (kveval calls Python in "
              "process_docs, doc_to_text, doc_to_target, doc_to_choice, process_results, metric_list's metric and "
              "aggregation, fewshot_config's samples and doc_to_*, and filter_list's function and filter_fn)");
    CHECK(err("task: t\ndoc_to_txt: q\n") == f + ":2: doc_to_txt: unknown lm-eval task key (did you mean 'doc_to_text'?)");
    CHECK(err("task: t\noutput_type: loglikelihood\ndoc_to_text: \"{{q|map(attribute='x')}}\"\ndoc_to_target: a\n")
              .rfind(f + ":3: doc_to_text: template line 1, column 5: the filter 'map' is not supported", 0) == 0);
    CHECK(err("task: t\noutput_type: loglikelihood\ndoc_to_text: \"{{qq}}\"\ndoc_to_target: a\n") ==
          d.file("d.jsonl") + ":1: doc_to_text: template line 1, column 3: 'qq' is undefined (did you mean 'q'?) (template from " + f +
              ":3: doc_to_text)");
    CHECK(err("task: t\noutput_type: loglikelihood\ndoc_to_text: q\ndoc_to_target: a\nmetric_list:\n  - metric: acc\n    aggregation: median\n") ==
          f + ":5: metric_list[0].aggregation: aggregation \"median\" for acc is not supported (kveval aggregates acc with \"mean\")");
    CHECK(err("task: t\noutput_type: generate_until\ndoc_to_text: q\nfilter_list:\n  - name: x\n    filter:\n      - function: regex\n"
              "        regex_pattern: \"(\"\n")
              .find("filter_list 'x': regex \"(\": missing closing parenthesis") != std::string::npos);
    CHECK(err("task: [unclosed\n").rfind(f + ":2:", 0) == 0);
    CHECK(err("include: t.yaml\ntask: t\n").find("include cycle") != std::string::npos);
    // A "billion laughs" file: 9 levels of 10 aliases each stand for 10^9 values; refused after 10^6.
    std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
    for (int i = 1; i < 9; ++i) {
      bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
      for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
      bomb += "]\n";
    }
    CHECK(err(bomb + "task: t\n").find("t.yaml:1: a5[7][8][8][8][9]: the file expands to more than 1000000 values") != std::string::npos);
    CHECK(err("include: nope.yaml\ntask: t\n") == f + ":1: include: file \"" + d.file("nope.yaml") + "\" not found");
    d.write("base.yaml", "output_type: loglikelihood\ndoc_to_text: q\ndoc_to_target: a\ndescription: base\n");
    CHECK(err("include: base.yaml\ntask: t\ndescription: \"D: \"\n") == "(no error)");
    // Hub datasets cannot be fetched: the spec entry must give the file
    d.write("hub.yaml", "task: t\ndataset_path: allenai/ai2_arc\noutput_type: loglikelihood\ndoc_to_text: q\ndoc_to_target: a\n");
    json j = {{"model", "m"}, {"tasks", json::array({{{"lm_eval_yaml", "hub.yaml"}}})}};
    CHECK(error_of([&] { parse_spec(j, "spec.json", d.path.string()); }).find("is not a local file") != std::string::npos);
  }
}
