// Hostile JSON input: deep nesting, numbers out of range, repeated
// keys in JSONL lines, huge template indices. Every case is one SpecError line
// naming the file and the line/column or JSON path; no library exception escapes.
#include <doctest/doctest.h>

#include <string>

#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using kveval::test::kTask;
using kveval::test::spec_error;
using kveval::test::TempDir;

namespace {

std::string nested(size_t depth, const std::string& inner = "1") {
  return std::string(depth, '[') + inner + std::string(depth, ']');
}

std::string nested_objects(size_t depth) {
  std::string s;
  for (size_t i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  return s + std::string(depth, '}');
}

}  // namespace

TEST_SUITE("eval.json_input") {
  TEST_CASE("nesting: 512 levels parse, 513 and 100 000 are refused at the bracket that goes too deep") {
    CHECK(parse_json_text(nested(kMaxJsonDepth), "x.json").is_array());
    CHECK(spec_error([] { parse_json_text(nested(kMaxJsonDepth + 1), "x.json"); }) ==
          "x.json:1:513: nested deeper than 512 levels (kveval's limit for JSON input)");
    // the issue's input: 100 000 levels (200 KB), arrays and objects; brackets inside strings do not count
    CHECK(spec_error([] { parse_json_text(nested(100000), "x.json"); }) ==
          "x.json:1:513: nested deeper than 512 levels (kveval's limit for JSON input)");
    CHECK(spec_error([] { parse_json_text("\n  " + nested_objects(100000), "x.json"); }) ==
          "x.json:2:2563: nested deeper than 512 levels (kveval's limit for JSON input)");
    CHECK(parse_json_text(R"({"s": ")" + std::string(100000, '[') + R"("})", "x.json")["s"].get<std::string>().size() ==
          100000);
  }

  TEST_CASE("nesting in a spec file and in a JSONL line names the file and the line") {
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n{\"q\": " + nested(100000) + ", \"a\": \"b\"}\n");
    std::string spec = d.write("spec.json", std::string(R"({"model": "m.gguf", "tasks": [)") + kTask + "]}");
    CHECK(spec_error([&] { load_spec(spec); }) ==
          d.file("data.jsonl") + ":2:518: nested deeper than 512 levels (kveval's limit for JSON input)");
    std::string deep = d.write("deep.json", "{\"model\": \"m.gguf\",\n\"tasks\": " + nested(100000) + "}");
    CHECK(spec_error([&] { load_spec(deep); }) ==
          deep + ":2:521: nested deeper than 512 levels (kveval's limit for JSON input)");
  }

  TEST_CASE("numbers beyond the double range are input errors with line and column") {
    CHECK(spec_error([] { parse_json_text("{\"model\": \"m\",\n \"limit\": 1e400}", "s.json"); }) ==
          "s.json:2:11: number 1e400 is out of range (JSON numbers must fit a 64-bit float, |x| < 1.8e308)");
    CHECK(spec_error([] { parse_json_text("[1, -2.5E+999]", "s.json"); }).find("s.json:1:5: number -2.5E+999 is out of range") == 0);
    const std::string digits(400, '9');  // an integer too big for uint64 and for a double
    CHECK(spec_error([&] { parse_json_text("[" + digits + "]", "s.json"); }).find("s.json:1:2: number " + std::string(37, '9') + "... is out of range") == 0);
    // in range: the largest double, underflow to 0 (as Python), 1e308; "1e400" inside a string is text
    CHECK(parse_json_text("[1.7976931348623157e308, 1e-400, 1e308]", "s.json")[1].get<double>() == 0.0);
    CHECK(parse_json_text(R"({"s": "1e400"})", "s.json")["s"] == "1e400");

    TempDir d;
    d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n\n{\"q\": \"a\", \"a\": \"b\", \"w\": 1e400}\n");
    std::string spec = d.write("spec.json", std::string(R"({"model": "m.gguf", "tasks": [)") + kTask + "]}");
    CHECK(spec_error([&] { load_spec(spec); }) ==
          d.file("data.jsonl") + ":3:27: number 1e400 is out of range (JSON numbers must fit a 64-bit float, |x| < 1.8e308)");
    std::string spec2 = d.write("spec2.json", R"({"model": "m.gguf", "seed": 1e400, "tasks": [])");
    CHECK(spec_error([&] { load_spec(spec2); }).find(spec2 + ":1:29: number 1e400 is out of range") == 0);
  }

  TEST_CASE("JSONL lines with a repeated key are refused like the spec's, with the line and the path") {
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n{\"q\": \"a\", \"a\": \"b\", \"q\": \"c\"}\n");
    std::string spec = d.write("spec.json", std::string(R"({"model": "m.gguf", "tasks": [)") + kTask + "]}");
    CHECK(spec_error([&] { load_spec(spec); }) == d.file("data.jsonl") + ":2: duplicate key 'q'");
    d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\", \"m\": [0, {\"x\": 1, \"x\": 2}]}\n");
    CHECK(spec_error([&] { load_spec(spec); }) == d.file("data.jsonl") + ":1: m[1]: duplicate key 'x'");
    // the same key in sibling objects is fine
    d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\", \"m\": [{\"x\": 1}, {\"x\": 2}]}\n");
    CHECK(load_spec(spec).tasks[0].docs.size() == 1);
  }

  TEST_CASE("the duplicate-key check: paths through arrays and objects, many keys") {
    CHECK(spec_error([] { parse_json_text(R"({"tasks": [1, [2, 3], {"a": {"b": [0, 0, {"k": 1, "k": 2}]}}]})", "s.json"); }) ==
          "s.json: tasks[2].a.b[2]: duplicate key 'k'");
    CHECK(spec_error([] { parse_json_text(R"({"a": 1, "a": 2})", "s.json"); }) == "s.json: duplicate key 'a'");
    // 200 000 distinct keys in one object, and 500-deep objects each with its own "a": linear, accepted
    std::string many = "{";
    for (int i = 0; i < 200000; ++i) many += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":0";
    many += "}";
    CHECK(parse_json_text(many, "s.json").size() == 200000);
    CHECK(parse_json_text(nested_objects(500), "s.json").is_object());
  }

  TEST_CASE("a template index with more digits than any integer is an input error, not stoul's exception") {
    TempDir d;
    d.write("data.jsonl", "{\"q\": \"a\", \"a\": \"b\", \"choices\": [\"x\", \"y\"]}\n");
    std::string spec = d.write(
        "spec.json",
        R"({"model": "m.gguf", "tasks": [{"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl",
            "doc_to_text": "Q: {{choices.99999999999999999999999}}", "doc_to_target": "a"}]})");
    CHECK(spec_error([&] { load_spec(spec); })
              .find(spec + ": tasks[0].doc_to_text: template line 1, column 14: integer literal 99999999999999999999999 is out of range") == 0);
    d.write("spec.json", R"({"model": "m.gguf", "tasks": [{"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl",
            "doc_to_text": "choices.18446744073709551616", "doc_to_target": "a"}]})");
    CHECK(spec_error([&] { load_spec(spec); }).find("field 'choices.18446744073709551616' not found") != std::string::npos);
    d.write("spec.json", R"({"model": "m.gguf", "tasks": [{"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl",
            "doc_to_text": "{{choices.1}}", "doc_to_target": "a"}]})");
    CHECK(load_spec(spec).tasks[0].docs[0].context == "y");
  }

  TEST_CASE("lm-eval YAML: a float beyond the double range or an integer beyond 64 bits names file:line and the key") {
    TempDir d;
    d.write("d.jsonl", "{\"q\": \"a\", \"a\": \"b\"}\n");
    auto err = [&](const std::string& yaml) {
      d.write("t.yaml", yaml);
      nlohmann::json j = {{"model", "m"},
                          {"tasks", nlohmann::json::array({{{"lm_eval_yaml", "t.yaml"}, {"dataset_path", "d.jsonl"}}})}};
      return spec_error([&] { parse_spec(j, "spec.json", d.path.string()); });
    };
    const std::string f = d.file("t.yaml");
    CHECK(err("task: t\noutput_type: loglikelihood\nnum_fewshot: 1.0e+400\n") ==
          f + ":3: num_fewshot: number 1.0e+400 is out of range (beyond the 64-bit float range)");
    CHECK(err("task: t\noutput_type: loglikelihood\nnum_fewshot: 99999999999999999999\n") ==
          f + ":3: num_fewshot: integer out of range (64-bit integers only)");
  }

  TEST_CASE("a huge unknown key gets no suggestion and no quadratic edit distance") {
    const std::string key(1 << 20, 'x');
    CHECK(closest(key, {"batch_size", "max_length"}).empty());
    CHECK(closest("batch_sise", {"batch_size", "max_length"}) == "batch_size");
  }
}
