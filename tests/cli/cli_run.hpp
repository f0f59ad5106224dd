#pragma once
// The CLI suites' fixtures: running the real binary ($KVEVAL_BIN, set by
// ctest) as one command through /bin/sh with stdout and stderr captured in
// files, the small spec pieces and output checks several suites share, and
// (at the end) the names every CLI suite uses, declared at file scope.
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "../eval/eval_test_util.hpp"
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

/// Number of lines ('\n' characters) in `s`: a one-line error has 1.
inline size_t count_lines(const std::string& s) {
  size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

/// Number of files in `dir` whose name holds ".tmp." (the atomic writer's temporaries left behind).
inline size_t temp_files(const std::filesystem::path& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().filename().string().find(".tmp.") != std::string::npos) ++n;
  return n;
}

/// Exit code 2 (usage or input error) and the error output exactly `line` and a newline.
inline void check_one_line(const Run& r, const std::string& line) {
  CHECK(r.code == 2);
  CHECK(r.err == line + "\n");
}

/// A loglikelihood task "ll" with two inline documents (context "c", target "x").
inline constexpr const char* kLL =
    R"({"name": "ll", "output_type": "loglikelihood", "docs": [{"c": "Lily went to the", "x": "park"}, {"c": "Tom saw a", "x": "dog"}], "doc_to_text": "c", "doc_to_target": "x"})";

}  // namespace kveval::test

using kveval::test::check_one_line;
using kveval::test::count_lines;
using kveval::test::kLL;
using kveval::test::kTask;
using kveval::test::quote;
using kveval::test::Run;
using kveval::test::run_kveval;
using kveval::test::ScratchDir;
using kveval::test::slurp;
using kveval::test::task_tree;
using kveval::test::TempDir;
using kveval::test::temp_files;
using nlohmann::json;
