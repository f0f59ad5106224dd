// End-to-end runs of `kveval run` ($KVEVAL_BIN): the demo spec, output files,
// exit codes, one-line errors for bad input, baseline gating.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "../eval/eval_test_util.hpp"
#include "test_support.hpp"

using kveval::test::TempDir;
using nlohmann::json;

namespace {

struct Run {
  int code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `kveval <args>` with stdout and stderr captured in files of `dir`.
Run run_kveval(const TempDir& dir, const std::string& args) {
  const char* bin = std::getenv("KVEVAL_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "KVEVAL_BIN is not set (run through ctest)");
  std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  std::string cmd = quote(bin) + " " + args + " >" + quote(out) + " 2>" + quote(err);
  int st = std::system(cmd.c_str());
  Run r;
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

const char* kLL = R"({"name": "ll", "output_type": "loglikelihood", "docs": [{"c": "Lily went to the", "x": "park"}, {"c": "Tom saw a", "x": "dog"}], "doc_to_text": "c", "doc_to_target": "x"})";

std::string spec_with(const std::string& tasks) {
  return "{\"model\": " + json(kveval::test::model_path()).dump() + ", \"max_length\": 64, \"tasks\": [" + tasks + "]}";
}

}  // namespace

TEST_SUITE("cli.run") {
  TEST_CASE("the demo spec runs end to end: log-likelihood phase before generation, files written, exit 0") {
    TempDir d;
    std::string spec = kveval::test::source_dir() + "/tasks/demo.json";
    Run r = run_kveval(d, "run " + quote(spec) + " --model " + quote(kveval::test::model_path()) +
                          " --limit 5 --output " + quote(d.file("results.json")) + " --log-samples " +
                          quote(d.file("samples.jsonl")));
    INFO(r.err);
    REQUIRE(r.code == 0);
    // the spec lists generation first; the phase table shows log-likelihood first
    size_t ll = r.out.find("| loglikelihood "), pre = r.out.find("| prefill "), dec = r.out.find("| decode ");
    REQUIRE(ll != std::string::npos);
    REQUIRE(pre != std::string::npos);
    CHECK(ll < pre);
    CHECK(pre < dec);
    CHECK(r.out.find("after teardown") != std::string::npos);
    CHECK(r.out.find(", 0 after teardown") != std::string::npos);
    CHECK(r.out.find("0 with caches set up") != std::string::npos);
    CHECK(r.out.find("story_cloze") != std::string::npos);
    CHECK(r.out.find("acc_norm") != std::string::npos);
    CHECK(r.out.find("nan") == std::string::npos);
    CHECK(r.err.find("generation cache:") != std::string::npos);
    json res = json::parse(slurp(d.file("results.json")));
    CHECK(res["model"]["sha256"] == "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d");
    CHECK(res["kveval"]["version"].is_string());
    CHECK(res["kveval"]["git_hash"].is_string());
    CHECK(res["threads"].get<int>() >= 1);
    CHECK(res["config"]["batch_size"] == 8);
    CHECK(res["config"]["tasks"][0]["name"] == "story_generation");
    CHECK(res["results"]["story_cloze"]["acc"].is_number());
    CHECK(res["results"]["story_cloze"]["acc_stderr"].is_number());
    CHECK(res["n-samples"]["story_cloze"]["original"] == 44);
    CHECK(res["n-samples"]["story_cloze"]["effective"] == 5);
    CHECK(res["cache"]["bytes_after_teardown"] == 0);
    CHECK(res["cache"]["bytes_at_setup"].get<long>() > 0);
    CHECK(res["instrumentation"]["loglikelihood_forward_with_cache_setup"] == 0);
    std::vector<std::string> phases;
    for (const auto& p : res["phases"]) phases.push_back(p["name"]);
    CHECK(phases == std::vector<std::string>{"load", "requests", "loglikelihood", "cache setup", "prefill", "decode",
                                             "cache teardown"});
    // one sample line per request: 5 gen + 5 x 4 choices + 5 loglikelihood + >= 5 rolling windows
    std::string samples = slurp(d.file("samples.jsonl"));
    CHECK(count_lines(samples) >= 35);
    std::istringstream in(samples);
    std::string line;
    std::getline(in, line);
    json first = json::parse(line);
    CHECK(first["task"] == "story_generation");
    CHECK(first["stop_reason"].is_string());
    CHECK(first["output"].is_string());
    CHECK(first["tokens"].is_number());
  }

  TEST_CASE("bad input: one-line error naming the place, non-zero exit") {
    TempDir d;
    struct Case {
      std::string name, spec, data, expect;
    };
    std::vector<Case> cases = {
        {"trailing comma", "{\n  \"model\": \"m.gguf\",\n  \"tasks\": [],\n}\n", "", "spec.json:4:1: "},
        {"missing output_type", spec_with(R"({"name": "t", "docs": []})"), "",
         "spec.json: tasks[0]: missing required key 'output_type'"},
        {"unknown key", spec_with(R"({"name": "t", "output_type": "generate_until", "docs": [], "doc_to_txt": "x"})"), "",
         "spec.json: tasks[0].doc_to_txt: unknown key (did you mean 'doc_to_text'?)"},
        {"broken JSONL line",
         spec_with(R"({"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl", "doc_to_text": "c", "doc_to_target": "x"})"),
         "{\"c\": \"a\", \"x\": \"b\"}\n{\"c\": \"a\", \"x\": }\n", "data.jsonl:2:"},
        {"MC target out of range",
         spec_with(R"({"name": "t", "output_type": "multiple_choice", "dataset_path": "data.jsonl", "doc_to_text": "c", "doc_to_choice": "ch", "doc_to_target": "g"})"),
         "{\"c\": \"a\", \"ch\": [\"x\", \"y\"], \"g\": 2}\n", "data.jsonl:1: doc_to_target: gold index 2 out of range [0, 2)"},
    };
    for (const auto& c : cases) {
      CAPTURE(c.name);
      std::string spec = d.write("spec.json", c.spec);
      if (!c.data.empty()) d.write("data.jsonl", c.data);
      Run r = run_kveval(d, "run " + quote(spec));
      CHECK(r.code == 2);
      CHECK(r.out.empty());
      CHECK(count_lines(r.err) == 1);
      CHECK(r.err.find(c.expect) != std::string::npos);
      CHECK(r.err.rfind("kveval: error: ", 0) == 0);
    }
    // a missing model file: usage error, named
    std::string spec = d.write("spec.json", R"({"model": "nowhere.gguf", "tasks": [)" + std::string(kLL) + "]}");
    Run r = run_kveval(d, "run " + quote(spec));
    CHECK(r.code == 2);
    CHECK(r.err.find("nowhere.gguf: model file not found") != std::string::npos);
  }

  TEST_CASE("per-request errors (empty continuation, empty rolling document) are counted: exit 4, no NaN") {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(std::string(kLL) + R"(,
      {"name": "empty", "output_type": "loglikelihood", "target_delimiter": "", "docs": [{"c": "Lily", "x": ""}], "doc_to_text": "c", "doc_to_target": "x"},
      {"name": "roll", "output_type": "loglikelihood_rolling", "docs": [{"t": ""}, {"t": "Once upon a time"}], "doc_to_target": "t"})"));
    Run r = run_kveval(d, "run " + quote(spec) + " --output " + quote(d.file("r.json")));
    INFO(r.out << r.err);
    CHECK(r.code == 4);
    CHECK(r.out.find("2 request(s) failed") != std::string::npos);
    CHECK(r.out.find("n/a") != std::string::npos);
    CHECK(r.out.find("nan") == std::string::npos);
    CHECK(r.out.find("inf") == std::string::npos);
    json res = json::parse(slurp(d.file("r.json")));
    CHECK(res["request_errors"]["total"] == 2);
    CHECK(res["results"]["empty"]["acc"].is_null());
    CHECK(res["results"]["roll"]["word_perplexity"].is_number());
  }

  TEST_CASE("--baseline: exit 3 when a metric got worse by more than --tolerance") {
    TempDir d;
    std::string spec = d.write("spec.json", spec_with(kLL));
    Run a = run_kveval(d, "run " + quote(spec) + " -o " + quote(d.file("base.json")));
    REQUIRE(a.code == 0);
    Run same = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("base.json")));
    CHECK(same.code == 0);
    json base = json::parse(slurp(d.file("base.json")));
    base["results"]["ll"]["perplexity"] = base["results"]["ll"]["perplexity"].get<double>() - 0.5;  // baseline was better
    std::ofstream(d.file("better.json")) << base.dump();
    Run worse = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("better.json")) + " --tolerance 0.1");
    CHECK(worse.code == 3);
    CHECK(worse.err.find("regression: ll perplexity") != std::string::npos);
    Run tolerated = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("better.json")) + " --tolerance 1");
    CHECK(tolerated.code == 0);
    std::ofstream(d.file("junk.json")) << "{\"x\": 1,}";
    Run junk = run_kveval(d, "run " + quote(spec) + " --baseline " + quote(d.file("junk.json")));
    CHECK(junk.code == 2);
    CHECK(junk.err.find("junk.json:1:") != std::string::npos);
  }
}
