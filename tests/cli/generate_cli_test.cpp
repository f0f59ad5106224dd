// `kveval generate` end to end: streamed text equals the reference greedy text,
// cached and uncached; bad options are one-line errors with exit code 2.
#include <doctest/doctest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "test_support.hpp"

namespace {

struct Result {
  int code;
  std::string out;
};

// Runs kveval with `args`; stdout only (stderr to a file when `err` is set).
Result run_kveval(const std::string& args, const std::string& err = "/dev/null") {
  const char* bin = std::getenv("KVEVAL_BIN");
  REQUIRE(bin != nullptr);
  std::string cmd = std::string(bin) + " " + args + " 2>" + err;
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

std::string slurp(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";
  std::string s;
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) s.append(buf.data(), n);
  std::fclose(f);
  return s;
}

}  // namespace

TEST_SUITE("cli.generate") {
  TEST_CASE("streamed greedy text equals the reference, with and without the cache" * kveval::test::needs_model()) {
    const auto& ref = kveval::test::reference_cases("greedy");
    for (const auto& g : ref) {
      const std::string prompt = g["prompt"];
      const std::string args = "generate -t 1 --ignore-eos -m " + kveval::test::model_path() + " -n " +
                               std::to_string(g["max_gen_toks"].get<int>()) + " -p '" + prompt + "'";
      const std::string want = prompt + g["text"].get<std::string>() + "\n";
      auto cached = run_kveval(args);
      CHECK(cached.code == 0);
      CHECK(cached.out == want);
      auto uncached = run_kveval(args + " --no-cache");
      CHECK(uncached.code == 0);
      CHECK(uncached.out == want);
    }
  }

  TEST_CASE("bad options: one line on stderr, exit 2" * kveval::test::needs_model()) {
    const kveval::test::ScratchDir dir("generate_cli");
    const std::string err = dir.file("stderr.txt");
    for (const char* bad : {"--max-length 100000", "-n -1", "-t -3"}) {
      CAPTURE(bad);
      auto r = run_kveval("generate -m " + kveval::test::model_path() + " " + bad, err);
      CHECK(r.code == 2);
      const std::string e = slurp(err);
      CHECK(e.rfind("kveval: error: ", 0) == 0);
      CHECK(std::count(e.begin(), e.end(), '\n') == 1);
    }
  }
}
