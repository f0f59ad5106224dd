#pragma once
// Helpers for the eval/cli suites: a fresh temporary directory per test and small file writers.
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "test_support.hpp"
#include "util/error.hpp"

namespace kveval::test {

/// A new empty directory under the system temp dir (a ScratchDir), removed on destruction.
struct TempDir : ScratchDir {
  TempDir() : ScratchDir("eval") {}
  /// Writes `text` to `name` inside the directory; returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = file(name);
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
};

/// The message of the SpecError `f` throws; "" and a failed check when it throws
/// nothing or another exception (named in the failure).
template <class F>
std::string spec_error(F&& f) {
  try {
    f();
  } catch (const SpecError& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL_CHECK("not a SpecError: " << e.what());
    return "";
  }
  FAIL_CHECK("no SpecError thrown");
  return "";
}

/// A loglikelihood task "t" reading data.jsonl next to the spec (context "q", target "a").
inline constexpr const char* kTask =
    R"({"name": "t", "output_type": "loglikelihood", "dataset_path": "data.jsonl", "doc_to_text": "q", "doc_to_target": "a"})";

/// The head of an lm-eval YAML task "t": generate_until over a json dataset, "Q: {{q}}\nA:" with target a,
/// until a newline (the caller appends dataset_kwargs, splits and few-shot keys).
inline constexpr const char* kYamlTaskHead = R"(task: t
output_type: generate_until
dataset_path: json
doc_to_text: "Q: {{q}}\nA:"
doc_to_target: a
generation_kwargs:
  until: ["\n"]
)";

/// tests/data/task_tree: an lm-eval style tree of task YAMLs, groups and tags.
inline std::string task_tree() { return source_dir() + "/tests/data/task_tree"; }

/// A `generate_until` task (inline docs, field "p") of one document per
/// prompt, stopping at `until` or after `max_gen_toks` tokens.
inline nlohmann::json gen_task(const std::string& name, const std::vector<std::string>& prompts, int max_gen_toks,
                               const std::vector<std::string>& until = {}) {
  nlohmann::json docs = nlohmann::json::array();
  for (const auto& p : prompts) docs.push_back({{"p", p}});
  return {{"name", name},
          {"output_type", "generate_until"},
          {"docs", docs},
          {"doc_to_text", "p"},
          {"generation_kwargs", {{"until", until}, {"max_gen_toks", max_gen_toks}}}};
}

}  // namespace kveval::test
