// `kveval generate` end to end: streamed text equals the reference greedy text,
// cached and uncached; seeded sampling; bad options are one-line errors with exit code 2.
#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>
#include <string>

#include "cli_run.hpp"

TEST_SUITE("cli.generate") {
  TEST_CASE("streamed greedy text equals the reference, with and without the cache" * kveval::test::needs_model()) {
    const auto& ref = kveval::test::reference_cases("greedy");
    const kveval::test::ScratchDir dir("generate_cli");
    for (const auto& g : ref) {
      const std::string prompt = g["prompt"];
      const std::string args = "generate -t 1 --ignore-eos -m " + kveval::test::model_path() + " -n " +
                               std::to_string(g["max_gen_toks"].get<int>()) + " -p '" + prompt + "'";
      const std::string want = prompt + g["text"].get<std::string>() + "\n";
      auto cached = run_kveval(dir, args);
      CHECK(cached.code == 0);
      CHECK(cached.out == want);
      auto uncached = run_kveval(dir, args + " --no-cache");
      CHECK(uncached.code == 0);
      CHECK(uncached.out == want);
    }
  }

  TEST_CASE("stderr: every line starts 'kveval: '; the stop and timing lines count tokens in the right number" *
            kveval::test::needs_model()) {
    const kveval::test::ScratchDir dir("generate_lines");
    const std::string args = "generate -t 1 --ignore-eos -m " + kveval::test::model_path() + " -p 'Once upon a time'";
    for (const bool cached : {true, false}) {
      CAPTURE(cached);
      const auto one = run_kveval(dir, args + " -n 1" + (cached ? "" : " --no-cache"));
      const auto two = run_kveval(dir, args + " -n 2" + (cached ? "" : " --no-cache"));
      CHECK(one.code == 0);
      CHECK(two.code == 0);
      for (const auto* r : {&one, &two}) {
        std::istringstream in(r->err);
        std::string line;
        int n = 0;
        while (std::getline(in, line)) {
          CAPTURE(line);
          CHECK(line.rfind("kveval: ", 0) == 0);
          ++n;
        }
        CHECK(n >= (cached ? 7 : 5));  // load summary, dtype, stop, load, [cache setup], prefill, decode, [teardown]
      }
      CHECK(one.err.find("kveval: stop: max_gen_toks after 1 token\n") != std::string::npos);
      CHECK(two.err.find("kveval: stop: max_gen_toks after 2 tokens\n") != std::string::npos);
      // decode counts n_gen - 1 steps, as bench's tg: the first token's logits come from the prefill
      const auto decode_line = [](const std::string& err) {
        const size_t at = err.find("kveval: decode ");
        return at == std::string::npos ? std::string() : err.substr(at, err.find('\n', at) - at);
      };
      CHECK(decode_line(one.err).find(" ms /     0 tokens (") != std::string::npos);
      // the prefill, the process's first forward pass, says that oneDNN's kernel generation is in its time
      CHECK(one.err.find(" tokens/s), oneDNN's one-time kernel generation included\n") != std::string::npos);
      CHECK(decode_line(one.err).find("oneDNN") == std::string::npos);
      CHECK(decode_line(two.err).find(" ms /     1 token  (") != std::string::npos);
      CHECK((one.err.find("kveval: cache setup ") != std::string::npos) == cached);
      CHECK((one.err.find("kveval: cache teardown ") != std::string::npos) == cached);
    }
  }

  TEST_CASE("sampling options: top-k 1 is the reference greedy text; a seed gives one text, cached or not" *
            kveval::test::needs_model()) {
    const auto& g = kveval::test::reference_cases("greedy").at(0);
    const kveval::test::ScratchDir dir("generate_sample");
    const std::string prompt = g["prompt"];
    const std::string args = "generate -t 1 --ignore-eos -m " + kveval::test::model_path() + " -n " +
                             std::to_string(g["max_gen_toks"].get<int>()) + " -p '" + prompt + "'";
    const std::string greedy = prompt + g["text"].get<std::string>() + "\n";
    const auto top1 = run_kveval(dir, args + " --temperature 0.8 --top-k 1 --seed 7");
    CHECK(top1.code == 0);
    CHECK(top1.out == greedy);
    CHECK(top1.err.find("kveval: sampling: temperature 0.8, top_k 1, top_p 1, min_p 0, seed 7\n") != std::string::npos);
    bool differs = false;
    for (const char* seed : {"1", "2", "3"}) {
      CAPTURE(seed);
      const std::string sampled = args + " --temperature 1.5 --top-p 0.95 --seed " + seed;
      const auto a = run_kveval(dir, sampled), b = run_kveval(dir, sampled + " --no-cache");
      CHECK(a.code == 0);
      CHECK(a.out == b.out);
      CHECK(a.out == run_kveval(dir, sampled).out);
      differs |= a.out != greedy;
    }
    CHECK(differs);
    const auto bad = run_kveval(dir, args + " --top-p 0");
    CHECK(bad.code == 2);
    CHECK(bad.err == "kveval: error: generate: top_p: 0 is outside (0, 1]\n");
    CHECK(run_kveval(dir, args + " --top-k 1.5").err == "kveval: error: generate: top_k: expected an integer, got 1.5\n");
  }

  TEST_CASE("bad options: one line on stderr, exit 2" * kveval::test::needs_model()) {
    const kveval::test::ScratchDir dir("generate_cli");
    for (const char* bad : {"--max-length 100000", "-n -1", "-t -3"}) {
      CAPTURE(bad);
      auto r = run_kveval(dir, "generate -m " + kveval::test::model_path() + " " + bad);
      CHECK(r.code == 2);
      const std::string& e = r.err;
      CHECK(e.rfind("kveval: error: ", 0) == 0);
      CHECK(std::count(e.begin(), e.end(), '\n') == 1);
    }
    // "Once upon a time" is 5 tokens with BOS: a context of 5 holds it, but leaves no room for a generated token
    const std::string p = "generate -m " + kveval::test::model_path() + " -p 'Once upon a time' --max-length 5";
    auto full = run_kveval(dir, p + " -n 1");
    CHECK(full.code == 2);
    CHECK(full.err.find("--prompt has 5 tokens (BOS included); the context holds 5 (--max-length), no room for a "
                        "generated token") != std::string::npos);
    // -n 0 is refused as bench's -n 0 is: a generation makes at least one token
    check_one_line(run_kveval(dir, p + " -n 0"),
                   "kveval: error: --max-gen-toks: must be >= 1, got 0 (a generation makes at least one token; to time "
                   "the prompt alone: kveval bench --tests pp)");
    auto over = run_kveval(dir, "generate -m " + kveval::test::model_path() + " -p 'Once upon a time' --max-length 4 -n 1");
    CHECK(over.code == 2);
    CHECK(over.err.find("--prompt has 5 tokens (BOS included); the context holds 4 (--max-length)\n") != std::string::npos);
    // no --prompt: the BOS token alone fills a context of 1
    check_one_line(run_kveval(dir, "generate -m " + kveval::test::model_path() + " --max-length 1"),
                   "kveval: error: --max-length 1 holds only the BOS token (no --prompt given): no room for a generated token");
  }
}
