#pragma once
// Test cases that need the real model file (models/stories260K.gguf) are
// decorated with `* kveval::test::needs_model()`. The decorator moves them to
// the doctest suite "<suite>/stories260K", which ctest runs as a separate test
// (`model.stories260K`, label `stories260K`) that reports SKIPPED, with the
// reason, when the file cannot be had; the module's own ctest test excludes
// them. Run directly (no filters), a suite skips them when the file is absent
// and says why (tests/test_main.cpp). Only the standard library here: the
// test main includes it.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <set>
#include <string>

namespace kveval::test {

/// Suffix of the doctest suites that hold model-dependent test cases.
inline constexpr const char* kModelSuiteSuffix = "/stories260K";

/// Path of the real model (KVEVAL_MODEL, else models/stories260K.gguf).
inline std::string model_file() {
  const char* p = std::getenv("KVEVAL_MODEL");
  return p ? p : "models/stories260K.gguf";
}

/// Why the real model cannot be used ("" when it can): a missing or unreadable file.
inline std::string model_unavailable_reason() {
  const std::string p = model_file();
  std::error_code ec;
  if (!std::filesystem::is_regular_file(p, ec))
    return "model file " + p + " not found (run scripts/fetch-model.sh, or set KVEVAL_MODEL)";
  if (std::filesystem::file_size(p, ec) == 0 || ec) return "model file " + p + " is empty or unreadable";
  return "";
}

/// Number of test cases decorated with needs_model() in this executable.
inline int& needs_model_count() {
  static int n = 0;
  return n;
}

/// doctest decorator for a test case that needs the real model: see the top of this file.
struct needs_model {
  void fill(doctest::detail::TestCase& tc) const {
    static std::set<std::string> names;  // suite names must outlive registration
    tc.m_test_suite = names.insert(std::string(tc.m_test_suite) + kModelSuiteSuffix).first->c_str();
    tc.m_skip = tc.m_skip || !model_unavailable_reason().empty();
    ++needs_model_count();
  }
};

}  // namespace kveval::test
