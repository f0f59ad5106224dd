#pragma once
// Helpers for the eval/cli suites: a fresh temporary directory per test and small file writers.
#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace kveval::test {

/// A new empty directory under the system temp dir, removed on destruction.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("kveval-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  /// Writes `text` to `name` inside the directory; returns the full path.
  std::string write(const std::string& name, const std::string& text) const {
    std::string p = (path / name).string();
    std::ofstream(p, std::ios::binary) << text;
    return p;
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace kveval::test
