#pragma once
// Helpers for the eval/cli suites: a fresh temporary directory per test and small file writers.
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_support.hpp"

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
