#pragma once
// Helpers for the eval/cli suites: a fresh temporary directory per test and small file writers.
#include <fstream>
#include <string>

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

}  // namespace kveval::test
