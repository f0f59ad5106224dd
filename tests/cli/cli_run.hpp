#pragma once
// Running the real binary ($KVEVAL_BIN, set by ctest) from the CLI suites:
// one command through /bin/sh with stdout and stderr captured in files.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>

#include "test_support.hpp"

namespace kveval::test {

/// Exit code (-1 when killed by a signal) and the captured output of one run.
struct Run {
  int code = -1;
  std::string out, err;
};

/// Whole contents of a file ("" when it cannot be read).
inline std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// `s` single-quoted for /bin/sh.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

/// Runs `<prefix>kveval <args>` through /bin/sh (args already shell-safe;
/// prefix: e.g. "ulimit -f 1; " or "NAME=value ", may be empty) with stdout and
/// stderr in files of `dir` (stdout.txt, stderr.txt, overwritten by each run).
inline Run run_kveval(const ScratchDir& dir, const std::string& args, const std::string& prefix = "") {
  const char* bin = std::getenv("KVEVAL_BIN");
  REQUIRE_MESSAGE(bin != nullptr, "KVEVAL_BIN is not set (run through ctest)");
  const std::string out = dir.file("stdout.txt"), err = dir.file("stderr.txt");
  const std::string cmd = prefix + quote(bin) + " " + args + " >" + quote(out) + " 2>" + quote(err);
  const int st = std::system(cmd.c_str());
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, slurp(out), slurp(err)};
}

}  // namespace kveval::test
