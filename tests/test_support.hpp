#pragma once
// Shared helpers for the doctest suites: where the real model and the
// reference file are (set by ctest through the environment), the reference
// values (sha256-checked), scratch directories.
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <stdexcept>
#include <string>
#include <unistd.h>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "test_skip.hpp"
#include "util/hash.hpp"

namespace kveval::test {

/// Path of the real model (KVEVAL_MODEL, else models/stories260K.gguf). A test
/// case that calls this must be decorated with `* kveval::test::needs_model()`
/// (so that it is skipped, not failed, without the file): called from any other
/// test case, or when the file cannot be had, it throws.
inline std::string model_path() {
  const doctest::ContextOptions* o = doctest::getContextOptions();
  if (o && o->currentTest) {
    const std::string suite = o->currentTest->m_test_suite, suffix = kModelSuiteSuffix;
    if (suite.size() < suffix.size() || suite.compare(suite.size() - suffix.size(), suffix.size(), suffix) != 0)
      throw std::runtime_error(std::string("test case '") + o->currentTest->m_name +
                               "' uses the model file: decorate it with * kveval::test::needs_model()");
  }
  const std::string why = model_unavailable_reason();
  if (!why.empty()) throw std::runtime_error(why);
  return model_file();
}

/// Source directory (KVEVAL_SOURCE_DIR, else ".").
inline std::string source_dir() {
  const char* p = std::getenv("KVEVAL_SOURCE_DIR");
  return p ? p : ".";
}

/// Path of the reference JSON (KVEVAL_REFERENCE, else <source>/tests/data/stories260K.reference.json).
inline std::string reference_path() {
  const char* p = std::getenv("KVEVAL_REFERENCE");
  return p ? p : source_dir() + "/tests/data/stories260K.reference.json";
}

/// sha256 of tests/data/stories260K.reference.json (recorded in tests/data/README.md).
inline constexpr const char* kReferenceSha256 = "645f3f8a9aeb6bffb72154afe17531148bcd809eaac660bdc8b9100a773759f4";

/// The read-only fixtures folder (KVEVAL_SHARED_DIR, else <source>/../shared)
/// as an absolute path, or "" when it does not exist: tests that need it skip
/// with a message naming the folder (see skip_without_shared in the suites).
inline std::string shared_dir() {
  const char* p = std::getenv("KVEVAL_SHARED_DIR");
  std::filesystem::path d = p ? std::filesystem::path(p) : std::filesystem::path(source_dir()) / ".." / "shared";
  std::error_code ec;
  if (!std::filesystem::is_directory(d, ec)) return "";
  return std::filesystem::weakly_canonical(d, ec).string();
}

/// A per-process scratch directory `<tmp>/kveval_test_<tag>_<pid>_<n>`, created on
/// construction and removed (with its contents) on destruction; `n` counts the
/// directories made by this process, so no two ever share a name.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag) {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("kveval_test_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  /// Full path of `name` inside the directory.
  std::string file(const std::string& name) const { return (path / name).string(); }
};

/// The parsed reference file; throws if it is missing or its sha256 is not
/// kReferenceSha256 (an edited or emptied file must not pass with fewer cases).
inline const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    const std::string p = reference_path();
    std::ifstream f(p);
    if (!f) throw std::runtime_error("reference file not found: " + p);
    const std::string sha = sha256_file(p);
    if (sha != kReferenceSha256)
      throw std::runtime_error("reference file " + p + " has sha256 " + sha + ", expected " + kReferenceSha256 +
                               " (see tests/data/README.md)");
    return nlohmann::json::parse(f);
  }();
  return j;
}

/// The list `key` of the reference file ("tokenize", "greedy", "loglikelihood",
/// "rolling"), required to be non-empty so that a loop over it cannot pass vacuously.
inline const nlohmann::json& reference_cases(const std::string& key) {
  const nlohmann::json& cases = reference().at(key);
  REQUIRE_MESSAGE(cases.is_array(), "reference '" << key << "' is not a list");
  REQUIRE_MESSAGE(!cases.empty(), "reference '" << key << "' is empty");
  return cases;
}

/// The message of whatever std::exception `f` throws, or "(no error)".
inline std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace kveval::test
