// kveval's YAML loader on the corpus of tests/data/yaml_corpus/: a few values
// checked here by hand; with KVEVAL_YAML_DUMP set to a directory, every file's
// values are also written there as <name>.json, which the eval.yaml_pyyaml test
// (tests/scripts/yaml_pyyaml_test.py) compares with Debian's python3-yaml.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "eval/lm_eval_yaml.hpp"
#include "util/error.hpp"

using kveval::eval::yaml_file_values;
namespace fs = std::filesystem;

namespace {

std::string corpus_dir() {
  const char* s = std::getenv("KVEVAL_SOURCE_DIR");
  return std::string(s ? s : ".") + "/tests/data/yaml_corpus";
}

}  // namespace

TEST_SUITE("eval.yaml_corpus") {
  TEST_CASE("quoted scalars read as PyYAML: trailing blank lines, \\_ \\N \\L \\P and code escapes") {
    nlohmann::json v = yaml_file_values(corpus_dir() + "/scalars.yaml");
    CHECK(v["dq_trailing_blank"] == "Evaluate the expression.\n\n");
    CHECK(v["sq_trailing_blank"] == "Evaluate the result of a random Boolean expression.\n\n");
    CHECK(v["list"][0] == "x\xC2\xA0y");                         // \_ is U+00A0
    CHECK(v["nested"]["key"] == "v\xC2\x85");                    // \N is U+0085
    CHECK(v["dq_folding"] == "one two\nthree\n\nfour");
    CHECK(v["sq_folding"] == "it's folded\nhere");
    CHECK(v["dq_escaped_break"] == "abcdef ghi");
    CHECK(v["list"][2] == "multi\nline ");
  }

  TEST_CASE("bad escapes name the file and line (yaml-cpp's scanner refuses them first)") {
    const fs::path p = fs::temp_directory_path() / "kveval_yaml_bad_escape.yaml";
    std::ofstream(p) << "a: 1\nb: \"x\\qy\"\n";
    CHECK_THROWS_WITH_AS(yaml_file_values(p.string()),
                         doctest::Contains("kveval_yaml_bad_escape.yaml:2:8: unknown escape character: q"), kveval::SpecError);
    std::ofstream(p) << "b: \"\\uD800\"\n";
    CHECK_THROWS_WITH_AS(yaml_file_values(p.string()), doctest::Contains("kveval_yaml_bad_escape.yaml:1:11: invalid unicode: 55296"),
                         kveval::SpecError);
    fs::remove(p);
  }

  TEST_CASE("the corpus as JSON for eval.yaml_pyyaml (KVEVAL_YAML_DUMP)") {
    const char* out = std::getenv("KVEVAL_YAML_DUMP");
    int n = 0;
    for (const auto& e : fs::directory_iterator(corpus_dir())) {
      if (e.path().extension() != ".yaml") continue;
      nlohmann::json v = yaml_file_values(e.path().string());
      CHECK(v.is_object());
      ++n;
      if (out) std::ofstream(fs::path(out) / (e.path().stem().string() + ".json"), std::ios::binary) << v.dump();
    }
    CHECK(n >= 2);
  }
}
