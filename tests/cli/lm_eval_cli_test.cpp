// `kveval run` on the lm-eval task YAML fixtures (tasks/lm_eval/): a spec
// listing all five, and a YAML given directly as the spec, complete on
// stories260K with their metrics (per filter for the GSM8K-style task).
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <sys/wait.h>

#include "../eval/eval_test_util.hpp"
#include "test_support.hpp"

using kveval::test::TempDir;
using nlohmann::json;

namespace {

std::string read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string sh_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

int run_kveval_cli(const TempDir& d, const std::string& args, std::string* out, std::string* err) {
  const char* bin = std::getenv("KVEVAL_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "KVEVAL_BIN is not set (run through ctest)");
  std::string cmd = sh_quote(bin) + " " + args + " >" + sh_quote(d.file("out.txt")) + " 2>" + sh_quote(d.file("err.txt"));
  int st = std::system(cmd.c_str());
  *out = read_all(d.file("out.txt"));
  *err = read_all(d.file("err.txt"));
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

}  // namespace

TEST_SUITE("cli.lm_eval") {
  TEST_CASE("the five lm-eval YAML fixtures run to completion on stories260K" * kveval::test::needs_model()) {
    TempDir d;
    std::string dir = kveval::test::source_dir() + "/tasks/lm_eval";
    std::string out, err;
    int code = run_kveval_cli(d, "run " + sh_quote(dir + "/all.json") + " --model " + sh_quote(kveval::test::model_path()) +
                             " --quiet --output " + sh_quote(d.file("results.json")),
                      &out, &err);
    INFO(err);
    REQUIRE(code == 0);
    json r = json::parse(read_all(d.file("results.json")));
    for (const char* t : {"arc_mini", "lambada_mini", "piqa_mini", "truthfulqa_mini"}) {
      CAPTURE(t);
      CHECK(r["results"][t]["acc,none"].is_number());
    }
    CHECK(r["results"]["lambada_mini"]["perplexity,none"].is_number());
    CHECK(r["results"]["gsm8k_mini"]["exact_match,strict-match"].is_number());
    CHECK(r["results"]["gsm8k_mini"]["exact_match,flexible-extract"].is_number());
    CHECK(r["n-samples"]["arc_mini"]["effective"] == 5);
    CHECK(r["configs"]["gsm8k_mini"]["lm_eval_yaml"].get<std::string>().find("gsm8k_mini.yaml") != std::string::npos);
    CHECK(r["configs"]["gsm8k_mini"]["metadata"]["version"] == 3.0);
    CHECK(r["versions"]["gsm8k_mini"] == 3.0);
    CHECK(out.find("exact_match,strict-match") != std::string::npos);
    CHECK(out.find("nan") == std::string::npos);
  }

  TEST_CASE("a YAML given as the spec runs with --model; a refused key is one line, exit 2" * kveval::test::needs_model()) {
    TempDir d;
    std::string dir = kveval::test::source_dir() + "/tasks/lm_eval";
    std::string out, err;
    int code = run_kveval_cli(d, "run " + sh_quote(dir + "/piqa_mini.yaml") + " --model " + sh_quote(kveval::test::model_path()) + " --quiet",
                      &out, &err);
    INFO(err);
    CHECK(code == 0);
    CHECK(out.find("piqa_mini") != std::string::npos);
    std::string bad = d.write("bad.yaml", "task: t\noutput_type: multiple_choice\nprocess_docs: !function utils.process_docs\n");
    code = run_kveval_cli(d, "run " + sh_quote(bad) + " --model " + sh_quote(kveval::test::model_path()), &out, &err);
    CHECK(code == 2);
    std::string msg = bad + ":3: process_docs: '!function' (Python code) is not supported by kveval\n";
    CHECK(err.size() >= msg.size());
    CHECK(err.compare(err.size() - std::min(err.size(), msg.size()), msg.size(), msg) == 0);
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
  }
}
