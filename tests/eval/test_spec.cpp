#include <doctest/doctest.h>

#include <string>
#include <tuple>
#include <vector>

#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using kveval::test::spec_error;
using kveval::test::TempDir;

namespace {

const char* kModelLine = R"("model": "m.gguf",)";

}  // namespace

TEST_SUITE("eval.spec") {
  TEST_CASE("a valid spec resolves paths, defaults and rendered documents") {
    TempDir d;
    d.write("data.jsonl", R"({"q": "Lily went to the", "a": "park"}
{"q": "Tom saw a", "a": "dog"}

{"q": "The cat", "a": "ran"}
)");
    std::string p = d.write("spec.json", std::string("{") + kModelLine + R"(
      "batch_size": 4, "limit": 2,
      "tasks": [{"name": "ll", "output_type": "loglikelihood", "dataset_path": "data.jsonl",
                 "doc_to_text": "Q: {{ q }}", "doc_to_target": "a"}]})");
    EvalSpec s = load_spec(p);
    CHECK(s.model == (d.path / "m.gguf").string());
    CHECK(s.batch_size == 4);
    CHECK(!s.max_length.has_value());
    REQUIRE(s.tasks.size() == 1);
    const TaskSpec& t = s.tasks[0];
    CHECK(t.target_delimiter == " ");
    CHECK(t.metric_list == std::vector<std::string>{"perplexity", "acc"});  // lm-eval's defaults
    CHECK(t.n_docs_total == 3);  // blank line skipped
    REQUIRE(t.docs.size() == 2);  // limit
    CHECK(t.docs[0].context == "Q: Lily went to the");
    CHECK(t.docs[1].target == "dog");
    CHECK(t.docs[1].origin == (d.path / "data.jsonl").string() + ":2");
    // --model override is taken as given
    CHECK(load_spec(p, "other.gguf").model == "other.gguf");
  }

  TEST_CASE("trailing comma: file:line:column") {
    TempDir d;
    std::string p = d.write("spec.json", "{\n  \"model\": \"m.gguf\",\n  \"tasks\": [],\n}\n");
    std::string msg = spec_error([&] { load_spec(p); });
    CHECK(msg.rfind(p + ":4:1: ", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
  }

  TEST_CASE("missing output_type names the task") {
    TempDir d;
    std::string p = d.write("spec.json", std::string("{") + kModelLine + R"("tasks": [
      {"name": "a", "output_type": "loglikelihood", "docs": [{"x": "a", "y": "b"}], "doc_to_text": "x", "doc_to_target": "y"},
      {"name": "b", "docs": []}]})");
    std::string msg = spec_error([&] { load_spec(p); });
    CHECK(msg.rfind(p + ": tasks[1]: missing required key 'output_type'", 0) == 0);
  }

  TEST_CASE("unknown keys suggest the closest known key") {
    TempDir d;
    std::string p = d.write("spec.json", std::string("{") + kModelLine + R"("tasks": [
      {"name": "a", "output_type": "loglikelihood", "docs": [], "doc_to_txt": "x", "doc_to_target": "y"}]})");
    CHECK(spec_error([&] { load_spec(p); }) == p + ": tasks[0].doc_to_txt: unknown key (did you mean 'doc_to_text'?)");
    std::string p2 = d.write("s2.json", R"({"modle": "m.gguf", "tasks": []})");
    CHECK(spec_error([&] { load_spec(p2); }) == p2 + ": modle: unknown key (did you mean 'model'?)");
    std::string p3 = d.write("s3.json", R"({"model": "m.gguf", "zzzzzzzz": 1, "tasks": []})");
    CHECK(spec_error([&] { load_spec(p3); }) == p3 + ": zzzzzzzz: unknown key");
  }

  TEST_CASE("dtype accepts f32, bf16, q8_0, q4_0 and auto; anything else names the key") {
    TempDir d;
    std::string p = d.write("dt.json", R"({"model": "m.gguf", "dtype": "fp16", "tasks": []})");
    CHECK(spec_error([&] { load_spec(p); }) == p + ": dtype: \"fp16\": expected \"f32\", \"bf16\", \"q8_0\", \"q4_0\", \"blocks\", \"blocks-bf16\" or \"auto\"");
    std::string q = d.write("q8.json", R"({"model": "m.gguf", "dtype": "q8_0", "tasks": [
      {"name": "a", "output_type": "loglikelihood", "docs": [{"x": "a", "y": "b"}], "doc_to_text": "x", "doc_to_target": "y"}]})");
    CHECK(load_spec(q).dtype == kveval::ComputeDtype::Q8_0);
    std::string q4 = d.write("q4.json", R"({"model": "m.gguf", "dtype": "q4_0", "tasks": [
      {"name": "a", "output_type": "loglikelihood", "docs": [{"x": "a", "y": "b"}], "doc_to_text": "x", "doc_to_target": "y"}]})");
    CHECK(load_spec(q4).dtype == kveval::ComputeDtype::Q4_0);
  }

  TEST_CASE("kv_cache_dtype accepts f32, bf16 and auto (the default); anything else names the key") {
    TempDir d;
    std::string p = d.write("kv.json", R"({"model": "m.gguf", "kv_cache_dtype": "fp8", "tasks": []})");
    CHECK(spec_error([&] { load_spec(p); }) == p + ": kv_cache_dtype: \"fp8\": expected \"f32\", \"bf16\", \"f16\" or \"auto\"");
    std::string n = d.write("kvn.json", R"({"model": "m.gguf", "kv_cache_dtype": 16, "tasks": []})");
    CHECK(spec_error([&] { load_spec(n); }).find("kv_cache_dtype") != std::string::npos);
    const char* task = R"([{"name": "a", "output_type": "loglikelihood", "docs": [{"x": "a", "y": "b"}], "doc_to_text": "x", "doc_to_target": "y"}])";
    std::string b = d.write("kvb.json", std::string(R"({"model": "m.gguf", "kv_cache_dtype": "bf16", "tasks": )") + task + "}");
    CHECK(load_spec(b).kv_cache_dtype == kveval::KvCacheDtype::BF16);
    std::string a = d.write("kva.json", std::string(R"({"model": "m.gguf", "tasks": )") + task + "}");
    CHECK(load_spec(a).kv_cache_dtype == kveval::KvCacheDtype::Auto);
  }

  TEST_CASE("limit: 0 is refused as --limit 0 is, a fraction is for the command line; each names its JSON path") {
    TempDir d;
    const std::string task = R"({"name": "a", "output_type": "loglikelihood", "docs": [{"x": "a", "y": "b"}, {"x": "c", "y": "d"}], )"
                             R"("doc_to_text": "x", "doc_to_target": "y")";
    d.write("t.yaml", "task: t\noutput_type: loglikelihood\ndoc_to_text: x\ndoc_to_target: y\ndataset_path: d.jsonl\n");
    d.write("d.jsonl", "{\"x\": \"a\", \"y\": \"b\"}\n");
    auto spec = [&](const std::string& top, const std::string& entry) {
      return d.write("spec.json", std::string("{") + kModelLine + top + R"("tasks": [)" + entry + "]}");
    };
    const std::string zero = " leaves no document to evaluate (lm-eval fails on it too); give N >= 1, or no limit for every document";
    for (const auto& [top, entry, want] : std::vector<std::tuple<std::string, std::string, std::string>>{
             {R"("limit": 0,)", task + "}", "limit: 0" + zero},
             {R"("limit": 0.0,)", task + "}", "limit: 0.0" + zero},
             {"", task + R"(, "limit": 0})", "tasks[0].limit: 0" + zero},
             {"", R"({"lm_eval_yaml": "t.yaml", "limit": 0})", "tasks[0].limit: 0" + zero},
             {R"("limit": 0.5,)", task + "}",
              "limit: 0.5: a fraction of each task's documents is accepted only on the command line (--limit 0.5); give "
              "an integer >= 1 here"},
             {"", task + R"(, "limit": -1})", "tasks[0].limit: expected an integer in [1, 1073741824], got -1"},
             {R"("limit": 1.5,)", task + "}", "limit: expected an integer, got 1.5"}}) {
      CAPTURE(top);
      CAPTURE(entry);
      const std::string p = spec(top, entry);
      CHECK(spec_error([&] { load_spec(p); }) == p + ": " + want);
    }
    // 1, the least limit, keeps one document
    const std::string one = spec(R"("limit": 1,)", task + "}");
    CHECK(load_spec(one).tasks[0].docs.size() == 1);
  }

  TEST_CASE("wrong types name the JSON path") {
    TempDir d;
    std::string p = d.write("spec.json", std::string("{") + kModelLine + R"("tasks": [
      {"name": "g", "output_type": "generate_until", "docs": [{"x": "a"}], "doc_to_text": "x",
       "generation_kwargs": {"until": [3], "max_gen_toks": 4}}]})");
    CHECK(spec_error([&] { load_spec(p); }) == p + ": tasks[0].generation_kwargs.until[0]: expected a string, got 3");
    std::string p2 = d.write("s2.json", std::string("{") + kModelLine + R"("batch_size": 0, "tasks": []})");
    CHECK(spec_error([&] { load_spec(p2); }) == p2 + ": batch_size: expected an integer in [1, 4096], got 0");
    // a value past int64 is echoed as written, not clamped
    std::string p2b = d.write("s2b.json", std::string("{") + kModelLine + R"("limit": 9223372036854775808, "tasks": []})");
    CHECK(spec_error([&] { load_spec(p2b); }).find(": limit: expected an integer in [1, ") != std::string::npos);
    CHECK(spec_error([&] { load_spec(p2b); }).find("got 9223372036854775808") != std::string::npos);
    // sampling keys of the wrong type say so, before the value check
    for (const auto& [kw, expect] : std::vector<std::pair<std::string, std::string>>{
             {R"("do_sample": "false")", "generation_kwargs.do_sample: expected a boolean, got \"false\""},
             {R"("do_sample": null)", "generation_kwargs.do_sample: expected a boolean, got null"},
             {R"("temperature": "0")", "generation_kwargs.temperature: expected a number, got \"0\""},
             {R"("temperature": -0.7)", "generation_kwargs.temperature: -0.7 is outside [0, inf)"}}) {
      CAPTURE(kw);
      std::string pk = d.write("sk.json", std::string("{") + kModelLine + R"("tasks": [
        {"name": "g", "output_type": "generate_until", "docs": [{"x": "a"}], "doc_to_text": "x",
         "generation_kwargs": {)" + kw + "}}]}");
      CHECK(spec_error([&] { load_spec(pk); }).find(expect) != std::string::npos);
    }
    std::string p3 = d.write("s3.json", std::string("{") + kModelLine + R"("max_length": 8, "tasks": [
      {"name": "g", "output_type": "generate_until", "docs": [{"x": "a"}], "doc_to_text": "x",
       "generation_kwargs": {"max_gen_toks": 9}}]})");
    std::string m3 = spec_error([&] { load_spec(p3); });
    CHECK(m3.rfind(p3 + ": tasks[0].generation_kwargs.max_gen_toks: 9 tokens do not fit max_length 8", 0) == 0);
    std::string p4 = d.write("s4.json", std::string("{") + kModelLine + R"("tasks": [
      {"name": "m", "output_type": "multiple_choice", "docs": [{"x": "a"}], "doc_to_text": "x", "doc_to_choice": ["a"],
       "doc_to_target": "0", "metric_list": ["acc", "acc_nrom"]}]})");
    CHECK(spec_error([&] { load_spec(p4); }).find("tasks[0].metric_list[1]: metric \"acc_nrom\" is not available for multiple_choice (did you mean 'acc_norm'?)") !=
          std::string::npos);
  }

  TEST_CASE("broken JSONL line names file and line") {
    TempDir d;
    std::string data = d.write("data.jsonl", "{\"x\": \"a\", \"y\": \"b\"}\n{\"x\": \"a\" \"y\": 1}\n");
    std::string p = d.write("spec.json", std::string("{") + kModelLine + R"("tasks": [
      {"name": "a", "output_type": "loglikelihood", "dataset_path": "data.jsonl", "doc_to_text": "x", "doc_to_target": "y"}]})");
    std::string msg = spec_error([&] { load_spec(p); });
    CHECK(msg.rfind(data + ":2:", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    d.write("data.jsonl", "{\"x\": \"a\", \"y\": \"b\"}\n[1, 2]\n");
    CHECK(spec_error([&] { load_spec(p); }) == data + ":2: expected a JSON object, got [1,2]");
    d.write("data.jsonl", "{\"x\": \"a\", \"z\": \"b\"}\n");
    CHECK(spec_error([&] { load_spec(p); }).rfind(data + ":1: doc_to_target: field 'y' not found", 0) == 0);
    std::filesystem::remove(data);
    CHECK(spec_error([&] { load_spec(p); }) == p + ": tasks[0].dataset_path: data file \"" + data + "\" not found");
  }

  TEST_CASE("multiple_choice gold: index, digit string, choice text; out of range is an error") {
    TempDir d;
    d.write("mc.jsonl", R"({"q": "a", "c": ["x", "y", "z"], "g": 2}
{"q": "b", "c": ["x", "y", "z"], "g": "1"}
{"q": "c", "c": ["x", "y", "z"], "g": "z"}
)");
    std::string p = d.write("spec.json", std::string("{") + kModelLine + R"("tasks": [
      {"name": "mc", "output_type": "multiple_choice", "dataset_path": "mc.jsonl", "doc_to_text": "q",
       "doc_to_choice": "c", "doc_to_target": "g"}]})");
    EvalSpec s = load_spec(p);
    REQUIRE(s.tasks[0].docs.size() == 3);
    CHECK(s.tasks[0].docs[0].gold == 2);
    CHECK(s.tasks[0].docs[1].gold == 1);
    CHECK(s.tasks[0].docs[2].gold == 2);
    CHECK(s.tasks[0].metric_list == std::vector<std::string>{"acc", "acc_norm"});
    std::string data = d.write("mc.jsonl", R"({"q": "a", "c": ["x", "y"], "g": 0}
{"q": "b", "c": ["x", "y"], "g": 4}
)");
    CHECK(spec_error([&] { load_spec(p); }) == data + ":2: doc_to_target: gold index 4 out of range [0, 2)");
    d.write("mc.jsonl", R"({"q": "a", "c": ["x", "y"], "g": "w"})");
    CHECK(spec_error([&] { load_spec(p); }).rfind(data + ":1: doc_to_target: \"w\" is neither", 0) == 0);
  }

  TEST_CASE("templates and inline docs") {
    nlohmann::json doc = {{"a", "Lily"}, {"n", 3}, {"o", {{"b", "park"}}}, {"l", {"x", "y"}}};
    CHECK(resolve_mapping(doc, "a", "d", "k") == "Lily");
    CHECK(resolve_mapping(doc, "{{a}} went to the {{ o.b }} {{n}} times", "d", "k") == "Lily went to the park 3 times");
    // lm-eval: a template prints Python's str() of the value; doc_to_choice reads it back with ast.literal_eval
    CHECK(resolve_mapping(doc, "{{l}}", "d", "doc_to_text") == "['x', 'y']");
    CHECK(resolve_mapping(doc, "{{l}}", "d", "doc_to_choice") == nlohmann::json({"x", "y"}));
    CHECK(resolve_mapping(doc, "l", "d", "doc_to_choice") == nlohmann::json({"x", "y"}));
    CHECK(resolve_mapping(doc, "o.b", "d", "k") == "park");
    // doc_to_target: digits become an index when the task has choices, "[...]" a list
    CHECK(resolve_mapping(doc, "{{n}}", "d", "doc_to_target", true) == 3);
    CHECK(resolve_mapping(doc, "{{n}}", "d", "doc_to_target", false) == "3");
    CHECK(resolve_mapping(doc, "{{l}}", "d", "doc_to_target") == nlohmann::json({"x", "y"}));
    CHECK(resolve_mapping(doc, "Q: {{a}}", "d", "doc_to_text") == "Q: Lily");
    CHECK(resolve_mapping(doc, "", "d", "doc_to_text") == "");
    CHECK(spec_error([&] { resolve_mapping(doc, "{{ab}}", "d:3", "doc_to_text"); }) ==
          "d:3: doc_to_text: template line 1, column 3: 'ab' is undefined (did you mean 'a'?) (template from doc_to_text)");
    CHECK(spec_error([&] { resolve_mapping(doc, "qustion", "d:3", "doc_to_text"); }) ==
          "d:3: doc_to_text: field 'qustion' not found (fields: a, l, n, o)");
    CHECK(spec_error([&] { resolve_mapping(doc, "x {{a", "d:3", "doc_to_text"); }) ==
          "doc_to_text: template line 1, column 3: unexpected end of template: '{{' is never closed; template: \"x {{a\"");
    CHECK(spec_error([&] { resolve_mapping(doc, "{% if a %}x", "d:3", "doc_to_text"); })
              .find("unexpected end of template: expected 'elif' or 'else' or 'endif'") != std::string::npos);
    CHECK(spec_error([&] { resolve_mapping(doc, "{{a}}", "d:3", "doc_to_choice"); }) ==
          "d:3: doc_to_choice: the template gave \"Lily\", which lm-eval reads with ast.literal_eval: not a Python literal at column 1: "
          "name 'Lily' is not a literal");
    nlohmann::json j = nlohmann::json::parse(R"({"model": "m", "tasks": [
      {"name": "t", "output_type": "loglikelihood", "docs": [{"x": "a"}, {"y": 1}], "doc_to_text": "x", "doc_to_target": "x"}]})");
    CHECK(spec_error([&] { parse_spec(j, "inline.json", "."); }).rfind("inline.json: tasks[0].docs[1]: doc_to_text: field 'x' not found", 0) == 0);
  }

  TEST_CASE("duplicate task names, both or neither data source, choices on a non-MC task") {
    auto err = [](const std::string& text) { return spec_error([&] { parse_spec(nlohmann::json::parse(text), "s.json", "."); }); };
    CHECK(err(R"({"model": "m", "tasks": [
      {"name": "t", "output_type": "generate_until", "docs": [{"x": "a"}], "doc_to_text": "x"},
      {"name": "t", "output_type": "generate_until", "docs": [{"x": "a"}], "doc_to_text": "x"}]})") ==
          "s.json: tasks[1].name: duplicate task name \"t\"");
    CHECK(err(R"({"model": "m", "tasks": [{"name": "t", "output_type": "generate_until", "doc_to_text": "x"}]})")
              .find("give exactly one of 'dataset_path'") != std::string::npos);
    CHECK(err(R"({"model": "m", "tasks": [{"name": "t", "output_type": "generate_until", "docs": [{"x": "a"}], "doc_to_text": "x", "doc_to_choice": "c"}]})") ==
          "s.json: tasks[0].doc_to_choice: only multiple_choice tasks take choices (this task is generate_until)");
    CHECK(err(R"({"model": "m", "tasks": [{"name": "t", "output_type": "loglikelihod", "docs": []}]})")
              .find("(did you mean 'loglikelihood'?)") != std::string::npos);
    CHECK(err(R"({"tasks": []})") == "s.json: missing required key 'model' (or pass --model)");
  }

  TEST_CASE("few-shot sampling is seeded, excludes the document itself and is deterministic") {
    std::string text = R"({"model": "m", "seed": 7, "tasks": [{"name": "t", "output_type": "loglikelihood",
      "docs": [{"q": "q0", "a": "a0"}, {"q": "q1", "a": "a1"}, {"q": "q2", "a": "a2"}, {"q": "q3", "a": "a3"}],
      "doc_to_text": "q", "doc_to_target": "a", "num_fewshot": 2, "fewshot_delimiter": "|", "description": "D:"}]})";
    EvalSpec a = parse_spec(nlohmann::json::parse(text), "s.json", ".");
    EvalSpec b = parse_spec(nlohmann::json::parse(text), "s.json", ".");
    for (size_t i = 0; i < 4; ++i) {
      const std::string& c = a.tasks[0].docs[i].context;
      CHECK(c == b.tasks[0].docs[i].context);
      CHECK(c.rfind("D:", 0) == 0);
      CHECK(c.size() >= 3);
      CHECK(c.substr(c.size() - 3) == "|q" + std::to_string(i));
      // two examples "qk ak|", none of them the document itself
      CHECK(c.find("q" + std::to_string(i) + " ") == std::string::npos);
      size_t bars = 0;
      for (char ch : c) bars += ch == '|';
      CHECK(bars == 2);
    }
    CHECK(spec_error([&] {
            parse_spec(nlohmann::json::parse(R"({"model": "m", "tasks": [{"name": "t", "output_type": "loglikelihood",
      "docs": [{"q": "q0", "a": "a0"}], "doc_to_text": "q", "doc_to_target": "a", "num_fewshot": 1}]})"),
                       "s.json", ".");
          }) == "s.json: tasks[0].num_fewshot: 1 example requested but only 0 available (a document is never its own example)");
  }

  TEST_CASE("edit distance") {
    CHECK(edit_distance("saturday", "sunday") == 3);
    CHECK(edit_distance("", "abc") == 3);
    CHECK(edit_distance("same", "same") == 0);
    CHECK(closest("batchsize", {"batch_size", "max_length"}) == "batch_size");
    CHECK(closest("qqqqqq", {"batch_size", "max_length"}).empty());
  }

  TEST_CASE("newcomer findings: empty until string, duplicate keys, non-string choices, bad task names, NUL paths") {
    TempDir d;
    auto spec = [&](const std::string& task) {
      return d.write("spec.json", std::string("{") + kModelLine + R"( "tasks": [)" + task + "]}");
    };
    // generation_kwargs.until as a single empty string: refused like [""]
    CHECK(spec_error([&] {
            load_spec(spec(R"({"name": "g", "output_type": "generate_until", "docs": [{"q": "a"}], "doc_to_text": "q", "generation_kwargs": {"until": ""}})"));
          }).find("spec.json: tasks[0].generation_kwargs.until: empty stop string") != std::string::npos);
    // duplicate keys at the top level and inside a nested object (JSON path of the object)
    std::string p = d.write("dup.json", R"({"model": "a.gguf", "model": "b.gguf", "tasks": []})");
    CHECK(spec_error([&] { load_spec(p); }) == p + ": duplicate key 'model'");
    CHECK(spec_error([&] {
            load_spec(spec(R"({"name": "t", "output_type": "loglikelihood", "docs": [{"c": "a", "x": "b"}, {"c": "a", "x": "b", "c": "z"}], "doc_to_text": "c", "doc_to_target": "x"})"));
          }).find("spec.json: tasks[0].docs[1]: duplicate key 'c'") != std::string::npos);
    // the same key in sibling objects is fine
    CHECK_NOTHROW(load_spec(spec(R"({"name": "t", "output_type": "loglikelihood", "docs": [{"c": "a", "x": "b"}, {"c": "a", "x": "b"}], "doc_to_text": "c", "doc_to_target": "x"})")));
    // choices must be strings
    CHECK(spec_error([&] {
            load_spec(spec(R"({"name": "t", "output_type": "multiple_choice", "docs": [{"q": "a", "ch": [1, 2], "g": 0}], "doc_to_text": "q", "doc_to_choice": "ch", "doc_to_target": "g"})"));
          }).find("doc_to_choice[0]: expected a string, got 1") != std::string::npos);
    // task names: printable, no '|'
    for (std::string bad : {std::string("a|b"), std::string("a\\nb")}) {
      CAPTURE(bad);
      CHECK(spec_error([&] {
              load_spec(spec(R"({"name": ")" + bad + R"(", "output_type": "loglikelihood", "docs": [{"c": "a", "x": "b"}], "doc_to_text": "c", "doc_to_target": "x"})"));
            }).find("spec.json: tasks[0].name: contains") != std::string::npos);
    }
    // a NUL byte inside a path
    std::string nul = d.write("nul.json", R"({"model": "m.gguf\u0000.txt", "tasks": []})");
    CHECK(spec_error([&] { load_spec(nul); }) == nul + ": model: path contains a NUL byte");
    // an empty / blank data file
    std::string blank = d.write("blank.jsonl", "\n  \n");
    CHECK(spec_error([&] {
            load_spec(spec(R"({"name": "t", "output_type": "loglikelihood", "dataset_path": "blank.jsonl", "doc_to_text": "c", "doc_to_target": "x"})"));
          }) == blank + ": no documents (the file is empty or blank)");
    // and an empty inline list
    CHECK(spec_error([&] {
            load_spec(spec(R"({"name": "t", "output_type": "loglikelihood", "docs": [], "doc_to_text": "c", "doc_to_target": "x"})"));
          }).find("spec.json: tasks[0].docs: no documents (an empty list)") != std::string::npos);
    // the spec path itself: a directory, a missing file
    CHECK(spec_error([&] { load_spec(d.path.string()); }).find(d.path.string() + ": is a directory") == 0);
    CHECK(spec_error([&] { load_spec(d.file("missing.json")); }) == d.file("missing.json") + ": not found");
  }
}
