// bench::plan: the steps a bench runs, for given options and model facts
// (no model file: the facts are given; every expected list is written by hand).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "bench/gen.hpp"
#include "bench/plan.hpp"

using namespace kveval;
using namespace kveval::bench;

namespace {

std::vector<std::string> lines(const std::vector<Instance>& steps) {
  std::vector<std::string> out;
  for (const Instance& s : steps) out.push_back(to_string(s));
  return out;
}

Options base_options() {
  Options o;
  o.model_path = "m.gguf";
  o.threads = {1};
  return o;
}

/// The expected and actual lists, one line each, side by side when they differ.
void check_lines(const std::vector<Instance>& steps, const std::vector<std::string>& expected) {
  const std::vector<std::string> got = lines(steps);
  for (size_t i = 0; i < std::max(got.size(), expected.size()); ++i) {
    CAPTURE(i);
    CHECK(got.at(std::min(i, got.size() - 1)) == expected.at(std::min(i, expected.size() - 1)));
  }
  CHECK(got.size() == expected.size());
}

}  // namespace

TEST_SUITE("bench.plan") {
  TEST_CASE("2 dtypes x 2 thread counts x pp,tg: each load's pp, then tg of both loads interleaved") {
    Options o = base_options();
    o.threads = {1, 2};
    o.dtypes = {"f32", "bf16"};
    o.n_prompt = {16};
    o.n_gen = {8};
    o.tests = {"pp", "tg"};
    const ModelFacts f{{"f32", "bf16"}, 512};
    check_lines(plan(o, f), {
                                "load t=1 f32",
                                "test pp t=1 f32/f32 b=1 p=16",
                                "load t=1 bf16",
                                "test pp t=1 bf16/bf16 b=1 p=16",
                                "test tg t=1 f32/f32 b=1 p=16 g=8",
                                "test tg t=1 bf16/bf16 b=1 p=16 g=8",
                                "load t=2 f32",
                                "test pp t=2 f32/f32 b=1 p=16",
                                "load t=2 bf16",
                                "test pp t=2 bf16/bf16 b=1 p=16",
                                "test tg t=2 f32/f32 b=1 p=16 g=8",
                                "test tg t=2 bf16/bf16 b=1 p=16 g=8",
                            });
    // The fields behind the lines.
    const std::vector<Instance> steps = plan(o, f);
    CHECK(steps[0].kind == Instance::Kind::Load);
    CHECK(steps[4].kind == Instance::Kind::Test);
    CHECK(steps[4].test == "tg");
    CHECK(steps[4].threads == 1);
    CHECK(steps[4].batch == 1);
    CHECK(steps[4].n_prompt == 16);
    CHECK(steps[4].n_gen == 8);
    CHECK(steps[4].positions == 0);
  }

  TEST_CASE("defaults: every default test in order, -b x -p for pp, the cache shapes capped at the context") {
    Options o = base_options();
    o.threads = {4};
    const ModelFacts f{{"f32"}, 2048};
    check_lines(plan(o, f), {
                                "load t=4 f32",
                                "test roofline t=4 f32/f32",
                                "test pp t=4 f32/f32 b=1 p=64",
                                "test pp t=4 f32/f32 b=1 p=512",
                                "test tg t=4 f32/f32 b=1 p=16 g=16",
                                "test tg t=4 f32/f32 b=1 p=16 g=64",
                                "test tg t=4 f32/f32 b=1 p=16 g=256",
                                "test tg-nocache t=4 f32/f32 b=1 p=16 g=16",
                                "test tg-nocache t=4 f32/f32 b=1 p=16 g=64",
                                "test tg-nocache t=4 f32/f32 b=1 p=16 g=256",
                                "test cache t=4 f32/f32 b=1 pos=512",
                                "test cache t=4 f32/f32 b=4 pos=2048",
                                "warning cache t=4 f32: cache: 4096 positions capped at the model's context length 2048",
                                "test cache t=4 f32/f32 b=8 pos=2048",
                                "test switch t=4 f32/f32 b=4 p=16 g=32",
                                "test ll t=4 f32/f32 b=1",
                            });
  }

  TEST_CASE("sizes the context cannot hold: skipped or capped with a warning where they would run") {
    Options o = base_options();
    o.batches = {1, 2};
    o.n_prompt = {16, 100};
    o.n_gen = {8, 60, 1};
    o.tests = {"pp", "tg", "cache", "switch"};
    o.cache_shapes = {{{1, 32}}, {{2, 100}}, {{2, 64}}};
    o.switch_gen = 64;
    const ModelFacts f{{"bf16"}, 64};
    const std::string cap = "warning tg t=1 bf16: tg: -n 60 after a 16-token prompt exceeds the context length 64; capped to 48";
    const std::string one =
        "warning tg t=1 bf16: tg: -n 1 skipped: tg times the decode steps after the prefill's token, so n_gen must be >= 2";
    check_lines(plan(o, f), {
                                "load t=1 bf16",
                                "test pp t=1 bf16/bf16 b=1 p=16",
                                "warning pp t=1 bf16: pp100 skipped: longer than the context length 64",
                                "test pp t=1 bf16/bf16 b=2 p=16",
                                "warning pp t=1 bf16: pp100 skipped: longer than the context length 64",
                                cap,
                                one,
                                "test tg t=1 bf16/bf16 b=1 p=16 g=8",
                                "test tg t=1 bf16/bf16 b=1 p=16 g=48",
                                cap,
                                one,
                                "test tg t=1 bf16/bf16 b=2 p=16 g=8",
                                "test tg t=1 bf16/bf16 b=2 p=16 g=48",
                                "test cache t=1 bf16/bf16 b=1 pos=32",
                                "warning cache t=1 bf16: cache: 100 positions capped at the model's context length 64",
                                "test cache t=1 bf16/bf16 b=2 pos=64",
                                "warning switch t=1 bf16: switch: --switch-prompt 16 and --switch-gen 64 capped to 16 and "
                                "48 (context length 64)",
                                "test switch t=1 bf16/bf16 b=4 p=16 g=48",
                            });
  }

  TEST_CASE("a context too short for a test skips it with one warning; -n after --tg-prompt leaving < 2 is skipped") {
    Options o = base_options();
    o.tests = {"tg-nocache", "switch", "ll", "gen-mixed"};
    o.tg_prompt = {16};
    o.n_gen = {4};
    {
      const ModelFacts f{{"f32"}, 17};
      check_lines(plan(o, f), {
                                  "load t=1 f32",
                                  "warning tg-nocache t=1 f32: tg-nocache: -n 4 after a 16-token prompt (--tg-prompt) "
                                  "leaves fewer than 2 of the context's 17 positions; skipped",
                                  "warning switch t=1 f32: switch: --switch-prompt 16 and --switch-gen 32 capped to 16 "
                                  "and 1 (context length 17)",
                                  "test switch t=1 f32/f32 b=4 p=16 g=1",
                                  "test ll t=1 f32/f32 b=1",
                                  "warning gen-mixed t=1 f32: gen-mixed skipped: its prompts of up to 32 tokens and at "
                                  "least 1 generated token need a context length of at least 33, but the model's is 17",
                              });
    }
    {
      const ModelFacts f{{"f32"}, 1};
      o.tests = {"switch", "ll"};
      check_lines(plan(o, f), {
                                  "load t=1 f32",
                                  "warning switch t=1 f32: switch skipped: a round needs 2 positions (a 1-token prompt and "
                                  "1 generated token) but the model's context length is 1",
                                  "warning ll t=1 f32: ll skipped: a request needs at least 2 tokens (one scored) but the "
                                  "model's context length is 1",
                              });
    }
  }

  TEST_CASE("repeated dtypes warn once; KV-cache types: cache and gen-mixed per type, the others with the first") {
    Options o = base_options();
    o.dtypes = {"f32", "auto", "bf16"};
    o.kv_cache_dtypes = {"f32", "f16", "auto"};
    o.tests = {"cache", "ll", "dequant", "gen-mixed"};
    o.cache_shapes = {{{1, 64}}};
    o.gen_mixed_prompts = 3;
    const ModelFacts f{{"f32", "f32", "bf16"}, 2048};
    // gen-mixed's rows: -b holds no value >= 2, so --gen-mixed-rows 8, capped at the 3 prompts.
    const GenMixedLengths w = gen_mixed_lengths(3, o.gen_mixed_max_gen, o.seed, 2048);
    REQUIRE(w.max_gen_toks.size() == 3);
    const std::string gm = fmt::format("b=3 g={} pos={}", w.gen_tokens(), w.positions);
    check_lines(plan(o, f), {
                                "load t=1 f32",
                                "warning --kv-cache-dtype t=1 f32: --kv-cache-dtype f32 and auto both resolve to f32 "
                                "with --dtype f32: measured once",
                                "test cache t=1 f32/f32 b=1 pos=64",
                                "test ll t=1 f32/f32 b=1",
                                "test dequant t=1 f32/f32",
                                "test gen-mixed t=1 f32/f32 " + gm,
                                "test cache t=1 f32/f16 b=1 pos=64",
                                "test gen-mixed t=1 f32/f16 " + gm,
                                "warning --dtype t=1 f32: --dtype f32 and auto both resolve to f32 for this model: "
                                "measured once",
                                "load t=1 bf16",
                                "test cache t=1 bf16/f32 b=1 pos=64",
                                "test ll t=1 bf16/f32 b=1",
                                "test gen-mixed t=1 bf16/f32 " + gm,
                                "test cache t=1 bf16/f16 b=1 pos=64",
                                "test gen-mixed t=1 bf16/f16 " + gm,
                                "test cache t=1 bf16/bf16 b=1 pos=64",
                                "test gen-mixed t=1 bf16/bf16 " + gm,
                            });
  }

  TEST_CASE("gen-mixed: one step per -b value >= 2, capped at the prompts; fidelity last at the first -t") {
    Options o = base_options();
    o.threads = {2, 1};
    o.batches = {1, 4, 16};
    o.tests = {"gen-mixed", "fidelity", "load"};
    o.gen_mixed_prompts = 10;
    const ModelFacts f{{"f32"}, 2048};
    const GenMixedLengths w = gen_mixed_lengths(10, o.gen_mixed_max_gen, o.seed, 2048);
    const std::string tail = fmt::format(" g={} pos={}", w.gen_tokens(), w.positions);
    check_lines(plan(o, f), {
                                "load t=2 f32",
                                "test load t=2 f32/f32",
                                "test gen-mixed t=2 f32/f32 b=4" + tail,
                                "test gen-mixed t=2 f32/f32 b=10" + tail,
                                "load t=1 f32",
                                "test load t=1 f32/f32",
                                "test gen-mixed t=1 f32/f32 b=4" + tail,
                                "test gen-mixed t=1 f32/f32 b=10" + tail,
                                "test fidelity t=2 /",
                            });
  }

  TEST_CASE("gen_mixed_lengths: lengths in range, capped to the context, positions the longest row") {
    const GenMixedLengths w = gen_mixed_lengths(64, 256, 1, 100);
    REQUIRE(w.prompt_lens.size() == 64);
    int capped = 0, positions = 0;
    for (size_t i = 0; i < 64; ++i) {
      CHECK(w.prompt_lens[i] >= 4);
      CHECK(w.prompt_lens[i] <= 32);
      CHECK(w.max_gen_toks[i] >= 1);
      CHECK(w.prompt_lens[i] + w.max_gen_toks[i] <= 100);
      capped += w.prompt_lens[i] + w.max_gen_toks[i] == 100;
      positions = std::max(positions, w.prompt_lens[i] + w.max_gen_toks[i]);
    }
    CHECK(w.capped > 0);  // 256 drawn against at most 96 free positions: most are capped
    CHECK(w.capped <= capped);
    CHECK(w.positions == positions);
    const GenMixedLengths same = gen_mixed_lengths(64, 256, 1, 100);
    CHECK(same.max_gen_toks == w.max_gen_toks);
  }
}
