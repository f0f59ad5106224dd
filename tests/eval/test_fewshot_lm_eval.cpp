// Few-shot prompts as lm-eval builds them (lm_eval/api/samplers.py ContextSampler,
// lm_eval/api/task.py fewshot_context, lm_eval/config/task.py FewshotConfig;
// tests/data/fewshot_delimiters: fewshot_config's own delimiters):
// small task YAMLs in lm-eval's syntax, rendered against prompts written here
// by hand. The sampled indices are CPython's random.Random(1234).sample, drawn
// num_fewshot + 1 at a time exactly when fewshot_split == test_split by name.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "eval/eval_test_util.hpp"
#include "eval/filters.hpp"
#include "eval/lm_eval_format.hpp"
#include "eval/report.hpp"
#include "eval/runner.hpp"
#include "eval/spec.hpp"
#include "util/error.hpp"

using namespace kveval::eval;
using kveval::test::kYamlTaskHead;
using kveval::test::TempDir;
using nlohmann::json;

namespace {

/// Five training documents t0..t4 (answers A0..A4) and three evaluation documents v0..v2 (B0..B2).
void write_data(const TempDir& d) {
  std::string train, val;
  for (int i = 0; i < 5; ++i) train += "{\"q\": \"t" + std::to_string(i) + "\", \"a\": \"A" + std::to_string(i) + "\"}\n";
  for (int i = 0; i < 3; ++i) val += "{\"q\": \"v" + std::to_string(i) + "\", \"a\": \"B" + std::to_string(i) + "\"}\n";
  d.write("train.jsonl", train);
  d.write("val.jsonl", val);
  d.write("val_copy.jsonl", val);
}

std::vector<std::string> contexts(const TempDir& d, const std::string& yaml_body) {
  std::string y = d.write("task.yaml", std::string(kYamlTaskHead) + yaml_body);
  EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {{{"lm_eval_yaml", y}}}}}, "spec.json", d.path.string());
  std::vector<std::string> out;
  for (const auto& doc : s.tasks[0].docs) out.push_back(doc.context);
  return out;
}

}  // namespace

TEST_SUITE("eval.fewshot_lm_eval") {
  TEST_CASE("validation-only task with a training split: None == None, so n + 1 drawn from train") {
    TempDir d;
    write_data(d);
    auto c = contexts(d, R"(dataset_kwargs:
  data_files: {train: train.jsonl, validation: val.jsonl}
training_split: train
validation_split: validation
num_fewshot: 2
)");
    REQUIRE(c.size() == 3);
    CHECK(c[0] == "Q: t3\nA: A3\n\nQ: t0\nA: A0\n\nQ: v0\nA:");
    CHECK(c[1] == "Q: t0\nA: A0\n\nQ: t4\nA: A4\n\nQ: v1\nA:");
    CHECK(c[2] == "Q: t0\nA: A0\n\nQ: t4\nA: A4\n\nQ: v2\nA:");  // drawing n would give t4, t0 here
  }

  TEST_CASE("validation-only task without a few-shot file: its own documents, n + 1 drawn, itself dropped") {
    TempDir d;
    write_data(d);
    auto c = contexts(d, R"(dataset_kwargs:
  data_files: {validation: val.jsonl}
validation_split: validation
num_fewshot: 2
)");
    REQUIRE(c.size() == 3);
    CHECK(c[0] == "Q: v1\nA: B1\n\nQ: v2\nA: B2\n\nQ: v0\nA:");
    CHECK(c[1] == "Q: v0\nA: B0\n\nQ: v2\nA: B2\n\nQ: v1\nA:");
    CHECK(c[2] == "Q: v0\nA: B0\n\nQ: v1\nA: B1\n\nQ: v2\nA:");
  }

  TEST_CASE("few-shot split with another name but the same documents: n drawn, the document dropped if drawn") {
    TempDir d;
    write_data(d);
    const std::vector<std::string> want = {"Q: v1\nA: B1\n\nQ: v0\nA:",  // drew v1, v0: only one example left
                                           "Q: v0\nA: B0\n\nQ: v2\nA: B2\n\nQ: v1\nA:",
                                           "Q: v0\nA: B0\n\nQ: v2\nA:"};  // drew v0, v2
    // another file with the same documents
    CHECK(contexts(d, R"(dataset_kwargs:
  data_files: {test: val.jsonl, validation: val_copy.jsonl}
test_split: test
fewshot_split: validation
num_fewshot: 2
)") == want);
    // test_split only: lm-eval falls back to the test documents, and None != "test"
    CHECK(contexts(d, R"(dataset_kwargs:
  data_files: {test: val.jsonl}
test_split: test
num_fewshot: 2
)") == want);
  }

  TEST_CASE("inline samples, first_n, fewshot_config doc_to_* and target_delimiter, description template, gen_prefix") {
    TempDir d;
    d.write("test.jsonl", "{\"topic\": \"maths\", \"q\": \"four?\", \"a\": \"4\"}\n"
                          "{\"topic\": \"sums\", \"q\": \"five?\", \"a\": \"5\"}\n");
    auto c = contexts(d, R"(dataset_kwargs:
  data_files: {test: test.jsonl}
test_split: test
description: "Topic: {{topic}}\n\n"
target_delimiter: "\nA:"
gen_prefix: "Let's think."
num_fewshot: 2
fewshot_config:
  sampler: first_n
  doc_to_text: "Question: {{question}}"
  doc_to_target: "{{answer}}!"
  target_delimiter: " => "
  samples:
    - {question: "one?", answer: "1"}
    - {question: "two?", answer: "2"}
    - {question: "three?", answer: "3"}
)");
    REQUIRE(c.size() == 2);
    CHECK(c[0] == "Topic: maths\n\nQuestion: one? => Let's think. 1!\n\nQuestion: two? => Let's think. 2!\n\n"
                  "Q: four?\nA:\nA:Let's think.");  // doc_to_text ends in "\nA:", then target_delimiter + gen_prefix
    CHECK(c[1] == "Topic: sums\n\nQuestion: one? => Let's think. 1!\n\nQuestion: two? => Let's think. 2!\n\n"
                  "Q: five?\nA:\nA:Let's think.");
  }

  TEST_CASE("fewshot_config's target_delimiter and fewshot_delimiter join the examples, the task's the rest") {
    const std::string dir = kveval::test::source_dir() + "/tests/data/fewshot_delimiters/";
    json tasks = json::array();
    for (const char* y : {"sums_mc.yaml", "sums_gen.yaml", "sums_plain.yaml"}) tasks.push_back({{"lm_eval_yaml", dir + y}});
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"system_instruction", "Be brief."}, {"tasks", tasks}}, "spec.json", ".");
    REQUIRE(s.tasks.size() == 3);
    const TaskSpec& mc = s.tasks[0];  // both delimiters given
    REQUIRE(mc.docs.size() == 2);
    CHECK(mc.docs[0].context == "Be brief.Sum: 2 + 2 = 4; Sum: 3 + 3 = 6; Sum: 5 + 5");
    CHECK(mc.docs[1].context == "Be brief.Sum: 2 + 2 = 4; Sum: 3 + 3 = 6; Sum: 2 + 7");
    CHECK(mc.docs[1].choices == std::vector<std::string>{"8", "9"});
    CHECK(mc.target_delimiter == " ->");  // each choice's continuation keeps the task's delimiter
    const TaskSpec& gen = s.tasks[1];  // fewshot_delimiter only: the examples take the task's target_delimiter " "
    REQUIRE(gen.docs.size() == 2);
    // the system prompt joins the description with the task's fewshot_delimiter "\n"
    CHECK(gen.docs[0].context == "Be brief.\nAdd.\nSum: 2 + 2 4 | Sum: 3 + 3 6 | Sum: 5 + 5");
    CHECK(gen.generation_kwargs.until == std::vector<std::string>{"\n"});  // generation stops at the task's
    const TaskSpec& plain = s.tasks[2];  // neither given: the task's delimiters throughout
    REQUIRE(plain.docs.size() == 2);
    CHECK(plain.docs[1].context == "Be brief.Sum: 2 + 2 =4\nSum: 3 + 3 =6\nSum: 2 + 7");
    CHECK(plain.generation_kwargs.until == std::vector<std::string>{"\n"});
  }

  TEST_CASE("fewshot_config's delimiters must be strings") {
    TempDir d;
    write_data(d);
    for (const char* key : {"target_delimiter", "fewshot_delimiter"}) {
      const std::string body = std::string("dataset_kwargs:\n  data_files: {validation: val.jsonl}\nvalidation_split: validation\n"
                                           "fewshot_config:\n  ") + key + ": [x]\n";
      const std::string want = std::string("fewshot_config.") + key;
      CHECK_THROWS_WITH_AS(contexts(d, body), doctest::Contains(want.c_str()), kveval::SpecError);
    }
  }

  TEST_CASE("gen_prefix naming a field: each example takes its own document's, an empty target ends at the prefix") {
    json task = {{"name", "g"},
                 {"output_type", "generate_until"},
                 {"doc_to_text", "q"},
                 {"doc_to_target", "a"},
                 {"gen_prefix", "p"},
                 {"num_fewshot", 1},
                 {"fewshot_config", {{"sampler", "first_n"}}},
                 {"docs", {{{"q", "x"}, {"a", ""}, {"p", "P1"}}, {{"q", "y"}, {"a", "Y"}, {"p", "P2"}}}}};
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".");
    REQUIRE(s.tasks[0].docs.size() == 2);
    // lm-eval main's fewshot_context: each example is build_qa_turn(q, a, gen_prefix=resolve_field(fs_doc,
    // fewshot_cfg.gen_prefix)), i.e. the example's own "p"; with a target: q + target_delimiter " " (as
    // requires_delimiter("y", "P2")) + maybe_delimit("P2", "Y") + fewshot_delimiter; then the document's
    // doc_to_text + target_delimiter + its own prefix
    CHECK(s.tasks[0].docs[0].context == "y P2 Y\n\nx P1");
    // x's target "" (has_answer false): user "x" + " " (requires_delimiter("x", "P1")), then the assistant
    // Message "P1" with no delimiter, so no fewshot_delimiter follows
    CHECK(s.tasks[0].docs[1].context == "x P1y P2");
  }

  TEST_CASE("the evaluated document's ending: target_delimiter before its gen_prefix only when requires_delimiter holds") {
    // lm-eval main's fewshot_context ends with build_qa_turn(q=doc_to_text, gen_prefix=doc_to_prefix(doc),
    // tgt_delim=target_delimiter, few_delim="") and no answer: user Message(q, tgt_delim if gen_prefix and
    // requires_delimiter(q, gen_prefix) else ""), then, when gen_prefix is not empty, assistant Message(gen_prefix)
    auto context = [](const std::string& text, const std::string& prefix, const std::string& delim = " ") {
      json task = {{"name", "e"},        {"output_type", "generate_until"}, {"doc_to_text", text},
                   {"doc_to_target", "a"}, {"gen_prefix", prefix},          {"target_delimiter", delim},
                   {"docs", {{{"q", "x"}, {"a", "X"}}}}};
      return parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".").tasks[0].docs[0].context;
    };
    CHECK(context("{{q}}", "A:") == "x A:");         // requires_delimiter("x", "A:")
    CHECK(context("{{q}}", "A:", "\n") == "x\nA:");  // the task's target_delimiter
    CHECK(context("{{q}}\n", "A:") == "x\nA:");      // "x\n"[-1].isspace(): no delimiter
    CHECK(context("{{q}}", " A:") == "x A:");        // " A:"[0].isspace(): no delimiter
    CHECK(context("{{q}}", "") == "x");              // `if gen_prefix` is false for "": the text alone
  }

  TEST_CASE("description naming a field: the document's value (resolve_field), else a template") {
    // lm-eval main: description = resolve_field(doc, config.description) or "": doc[field] when the
    // document has that key, else apply_template(field, doc)
    json task = {{"name", "d"},          {"output_type", "generate_until"}, {"doc_to_text", "{{q}}"},
                 {"doc_to_target", "a"}, {"description", "topic"},
                 {"docs", {{{"q", "x"}, {"a", "X"}, {"topic", "Maths. "}}}}};
    CHECK(parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".").tasks[0].docs[0].context == "Maths. x");
    task["description"] = "{{topic}}| ";
    CHECK(parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".").tasks[0].docs[0].context == "Maths. | x");
  }

  TEST_CASE("fewshot_config.gen_prefix: the examples' prefix in place of the task's; null or \"\" is none") {
    // lm-eval main's fewshot_context: each example is build_qa_turn(q, a, gen_prefix=resolve_field(fs_doc,
    // fewshot_cfg.gen_prefix), tgt_delim, few_delim); FewshotConfig.from_dict takes the task's gen_prefix unless
    // fewshot_config gives one (None included). first_n with the task's own documents draws docs 0 and 1 and drops
    // the document: doc 0's example is doc 1 ("y", "Y", p "P2")
    json task = {{"name", "f"},          {"output_type", "generate_until"}, {"doc_to_text", "{{q}}"},
                 {"doc_to_target", "a"}, {"gen_prefix", "A:"},              {"num_fewshot", 1},
                 {"fewshot_config", {{"sampler", "first_n"}, {"gen_prefix", "Answer:"}}},
                 {"docs", {{{"q", "x"}, {"a", "X"}, {"p", "P1"}}, {{"q", "y"}, {"a", "Y"}, {"p", "P2"}}}}};
    auto first = [&] { return parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".").tasks[0].docs[0].context; };
    // user "y" + " " (requires_delimiter("y", "Answer:")), assistant maybe_delimit("Answer:", "Y") + "\n\n";
    // then the document: "x" + " " + its own (the task's) prefix "A:"
    CHECK(first() == "y Answer: Y\n\nx A:");
    task["fewshot_config"]["gen_prefix"] = "p";  // a field: the example's own value
    CHECK(first() == "y P2 Y\n\nx A:");
    task["fewshot_config"]["gen_prefix"] = nullptr;  // None: no prefix, user "y" + " ", assistant "Y"
    CHECK(first() == "y Y\n\nx A:");
    task["fewshot_config"]["gen_prefix"] = "";
    CHECK(first() == "y Y\n\nx A:");
    task.erase("gen_prefix");  // the examples' prefix alone
    task["fewshot_config"]["gen_prefix"] = "Answer:";
    CHECK(first() == "y Answer: Y\n\nx");
    task["fewshot_config"]["gen_prefix"] = json::array({1});
    CHECK_THROWS_WITH_AS(first(), doctest::Contains("fewshot_config.gen_prefix"), kveval::SpecError);
  }

  TEST_CASE("fewshot_config.gen_prefix in a task YAML") {
    TempDir d;
    write_data(d);
    auto c = contexts(d, R"(dataset_kwargs:
  data_files: {validation: val.jsonl}
validation_split: validation
gen_prefix: "So"
num_fewshot: 1
fewshot_config:
  sampler: first_n
  gen_prefix: "Ans:"
)");
    REQUIRE(c.size() == 3);
    // v0's example is v1 (first_n over the validation documents, v0 dropped): build_qa_turn(q="Q: v1\nA:", a="B1",
    // gen_prefix="Ans:") = "Q: v1\nA:" + " " + maybe_delimit("Ans:", "B1") + "\n\n"; then "Q: v0\nA:" + " " + "So"
    CHECK(c[0] == "Q: v1\nA: Ans: B1\n\nQ: v0\nA: So");
  }

  TEST_CASE("regex_replace: lm-eval's Jinja filter, re.sub with Python's replacement syntax") {
    json task = {{"name", "r"},
                 {"output_type", "generate_until"},
                 {"doc_to_text", "{{ q | regex_replace('(\\\\w+) (\\\\w+)', '\\\\2 \\\\1') }}|{{ q | regex_replace('o', '0', 1) }}"},
                 {"docs", {{{"q", "hello world foo bar"}}}}};
    EvalSpec s = parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".");
    CHECK(s.tasks[0].docs[0].context == "world hello bar foo|hell0 world foo bar");
    task["doc_to_text"] = "{{ q | regex_replace('o', '\\\\q') }}";
    try {
      parse_spec({{"model", "m.gguf"}, {"tasks", {task}}}, "spec.json", ".");
      FAIL("no error");
    } catch (const kveval::SpecError& e) {
      CHECK(std::string(e.what()).find("bad escape \\q in the replacement") != std::string::npos);
    }
  }

  TEST_CASE("PyRegex::sub matches CPython 3.11's re.sub") {
    CHECK(PyRegex("x*").sub("abxd", "-") == "-a-b--d-");
    CHECK(PyRegex("(?P<n>\\d+)").sub("a1b22", "[\\g<n>|\\g<0>]") == "a[1|1]b[22|22]");
    CHECK(PyRegex("(a)|(b)").sub("ab", "[\\1\\2]") == "[a][b]");
    CHECK(PyRegex("a").sub("a", "\\n\\t\\\\") == "\n\t\\");
    CHECK(PyRegex("\\d").sub("1 2 3", "#", 2) == "# # 3");
    CHECK(PyRegex("\\d").sub("1 2 3", "#", -1) == "1 2 3");
    CHECK(PyRegex("b").sub("abc", "\\101\\0") == std::string("aA\0c", 4));
    CHECK(PyRegex("b").sub("abc", "\\&") == "a\\&c");
    CHECK(PyRegex("é").sub("café é", "e") == "cafe e");
    CHECK(PyRegex("").sub("é", "-") == "-é-");
    CHECK_THROWS_WITH_AS(PyRegex("a").sub("a", "\\1"), doctest::Contains("invalid group reference 1"), kveval::SpecError);
    CHECK_THROWS_WITH_AS(PyRegex("(a)").sub("a", "\\g<x>"), doctest::Contains("unknown group name 'x'"), kveval::SpecError);
  }
}
