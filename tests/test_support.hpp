#pragma once
// Shared helpers for the doctest suites: where the real model and the
// reference file are (set by ctest through the environment).
#include <cstdlib>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace kveval::test {

/// Path of the real model (KVEVAL_MODEL, else models/stories260K.gguf).
inline std::string model_path() {
  const char* p = std::getenv("KVEVAL_MODEL");
  return p ? p : "models/stories260K.gguf";
}

/// Path of the reference JSON (KVEVAL_REFERENCE, else models/stories260K.json).
inline std::string reference_path() {
  const char* p = std::getenv("KVEVAL_REFERENCE");
  return p ? p : "models/stories260K.json";
}

/// Source directory (KVEVAL_SOURCE_DIR, else ".").
inline std::string source_dir() {
  const char* p = std::getenv("KVEVAL_SOURCE_DIR");
  return p ? p : ".";
}

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

/// A per-process scratch directory `<tmp>/kveval_test_<tag>_<pid>`, created on
/// construction and removed (with its contents) on destruction.
struct ScratchDir {
  std::filesystem::path path;
  explicit ScratchDir(const std::string& tag)
      : path(std::filesystem::temp_directory_path() / ("kveval_test_" + tag + "_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

/// The parsed reference file; throws if it is missing.
inline const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream f(reference_path());
    if (!f) throw std::runtime_error("reference file not found: " + reference_path() + " (run scripts/fetch-model.sh)");
    return nlohmann::json::parse(f);
  }();
  return j;
}

}  // namespace kveval::test
