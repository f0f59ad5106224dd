// Dynamic (continuous) batching in generate_greedy: a row that ends is rewound
// and refilled with the next waiting prompt while the others decode. Every
// prompt's result must equal generating it alone in a one-row cache (ids, stop
// reasons, token counts, errors; log-probs to float rounding), whatever the
// number of rows, and equal the static schedule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

#include "backend/backend.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

/// Log-probs of the same token from matmuls over different row counts differ
/// only by float rounding (measured < 1e-6 nats); a wrong position or a leak
/// between rows moves them by far more than 1e-4.
constexpr double kLogprobTol = 1e-4;

const test::ScratchDir& scratch() {
  static const test::ScratchDir dir("dynbatch");
  return dir;
}

/// The "tiny" random model (64 wide, 2 layers, GQA 4/2, 300 tokens, 128 positions).
const std::string& tiny_path() {
  static const std::string path = [] {
    const std::string p = scratch().file("tiny.gguf");
    write_random_llama(p, random_model_preset("tiny"), 5);
    return p;
  }();
  return path;
}

Context& tiny() {
  static std::unique_ptr<Model> m = Model::load(tiny_path(), {.threads = 2});
  static Context c(*m);
  return c;
}

/// Token that makes the poisoned model's logits NaN: its embedding is the only
/// one with a non-zero element 0, which blk.0.attn_norm scales by 3e38 (Inf
/// after normalisation), so every later position of that sequence is NaN.
constexpr int32_t kPoison = 299;

/// A copy of the tiny model with the kPoison trap (weights stay finite, so the load accepts it).
Context& poisoned() {
  static std::unique_ptr<Model> m = [] {
    const std::string p = scratch().file("poisoned.gguf");
    gguf::File f(tiny_path());
    gguf::Writer w;
    for (const auto& [k, v] : f.metadata())
      if (k != "general.alignment") w.add(k, v);
    const uint64_t D = static_cast<uint64_t>(random_model_preset("tiny").n_embd);
    for (const auto& t : f.tensors()) {
      std::vector<float> data = f.tensor_f32(t.name, t.dims);
      if (t.name == "token_embd.weight")
        for (uint64_t tok = 0; tok < t.dims[1]; ++tok) data[tok * D] = tok == static_cast<uint64_t>(kPoison) ? 30.0f : 0.0f;
      if (t.name == "blk.0.attn_norm.weight") data[0] = 3e38f;
      w.add_tensor(t.name, t.dims, data);
    }
    w.write(p);
    return Model::load(p, {.threads = 2});
  }();
  static Context c(*m);
  return c;
}

std::vector<int32_t> random_prompt(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> u(3, vocab - 2);  // never kPoison (vocab - 1) nor EOS
  std::vector<int32_t> t(n);
  for (auto& x : t) x = u(g);
  t[0] = 1;  // BOS
  return t;
}

/// Each prompt generated alone in a one-row cache of `positions` (the batch-size-1 run).
std::vector<Generation> alone(Context& m, const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
                              int positions) {
  std::vector<Generation> out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions one = o;
    one.max_gen_toks = {o.max_gen_toks.size() == 1 ? o.max_gen_toks[0] : o.max_gen_toks[i]};
    if (o.should_stop)
      one.should_stop = [&o, i](int, std::span<const int32_t> ids) { return o.should_stop(static_cast<int>(i), ids); };
    KvCacheScope scope(m, 1, positions);
    out.push_back(generate_greedy(m, {prompts[i]}, one)[0]);
  }
  return out;
}

std::vector<Generation> batched(Context& m, const std::vector<std::vector<int32_t>>& prompts, GenerateOptions o,
                                int rows, int positions, Batching b, GenerateTiming* timing = nullptr) {
  o.batching = b;
  KvCacheScope scope(m, rows, positions);
  return generate_greedy(m, prompts, o, timing);
}

void check_same(const std::vector<Generation>& got, const std::vector<Generation>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i].ids == want[i].ids);
    CHECK(got[i].reason == want[i].reason);
    CHECK(got[i].prompt_tokens == want[i].prompt_tokens);
    REQUIRE(got[i].logprobs.size() == want[i].logprobs.size());
    double worst = 0;
    for (size_t j = 0; j < got[i].logprobs.size(); ++j)
      worst = std::max(worst, std::abs(got[i].logprobs[j] - want[i].logprobs[j]));
    CHECK(worst < kLogprobTol);
  }
}

/// Writes a random "tiny" Llama 128 wide with `n_ff` to the scratch folder as NAME.gguf; returns its path.
std::string wide_model(const std::string& name, int n_ff, uint32_t seed) {
  RandomModelSpec spec = random_model_preset("tiny");
  spec.name = name;
  spec.n_embd = 128;
  spec.n_ff = n_ff;
  const std::string path = scratch().file(name + ".gguf");
  write_random_llama(path, spec, seed);
  return path;
}

/// 11 prompts of 1..23 tokens with max_gen_toks spread over 0..100, index-dependent stop rules.
struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  GenerateOptions opts;
};

Workload tiny_workload() {
  Workload w;
  const std::vector<int> lens = {5, 1, 23, 9, 2, 17, 3, 12, 7, 20, 4};
  const std::vector<int> max = {60, 1, 100, 0, 37, 8, 90, 2, 45, 70, 25};
  for (size_t i = 0; i < lens.size(); ++i)
    w.prompts.push_back(random_prompt(static_cast<size_t>(lens[i]), 100 + static_cast<uint32_t>(i), 300));
  w.opts.max_gen_toks = max;
  w.opts.stop_at_eos = true;
  // prompt 5 stops at its first token; prompts 2 and 8 at a token divisible by 13 (a "stop string")
  w.opts.should_stop = [](int i, std::span<const int32_t> ids) {
    if (i == 5) return true;
    return (i == 2 || i == 8) && ids.back() % 13 == 0;
  };
  return w;
}

}  // namespace

TEST_SUITE("model.dynamic_batching") {
  TEST_CASE("random model: dynamic = static = batch size 1 (ids, reasons, counts), 11 prompts over 1, 3 and 4 rows") {
    Context& m = tiny();
    const Workload w = tiny_workload();
    const int positions = 64;  // prompts 2 and 6 hit "context full"
    const auto ref = alone(m, w.prompts, w.opts, positions);
    // the workload covers every way a row ends
    CHECK(ref[3].reason == StopReason::MaxTokens);
    CHECK(ref[3].ids.empty());  // max_gen_toks 0: no row taken
    CHECK(ref[1].ids.size() == 1);
    CHECK(ref[5].reason == StopReason::StopString);
    CHECK(ref[5].ids.size() == 1);  // ends at its first token
    CHECK(ref[6].reason == StopReason::ContextFull);
    CHECK(ref[6].ids.size() == size_t(positions - 3));
    bool any_long = false;
    for (const auto& g : ref) any_long = any_long || g.ids.size() >= 25;
    CHECK(any_long);
    for (int rows : {1, 3, 4}) {
      CAPTURE(rows);
      GenerateTiming td, ts;
      check_same(batched(m, w.prompts, w.opts, rows, positions, Batching::Dynamic, &td), ref);
      check_same(batched(m, w.prompts, w.opts, rows, positions, Batching::Static, &ts), ref);
      CHECK(td.decode_tokens == ts.decode_tokens);
      CHECK(td.prefill_tokens == ts.prefill_tokens);
      int64_t gen = 0, prompt = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        gen += static_cast<int64_t>(ref[i].ids.size());
        if (w.opts.max_gen_toks[i] > 0) prompt += ref[i].prompt_tokens;
      }
      CHECK(td.decode_tokens == gen);
      CHECK(td.prefill_tokens == prompt);
      // without log-probs (as `kveval run`): the same tokens and endings
      GenerateOptions nolp = w.opts;
      nolp.logprobs = false;
      const auto quick = batched(m, w.prompts, nolp, rows, positions, Batching::Dynamic);
      for (size_t i = 0; i < ref.size(); ++i) {
        CAPTURE(i);
        CHECK(quick[i].ids == ref[i].ids);
        CHECK(quick[i].reason == ref[i].reason);
        CHECK(quick[i].logprobs.empty());
      }
      if (rows == 1) CHECK(td.forward_passes == ts.forward_passes);  // one row: the schedules coincide
      else CHECK(td.forward_passes < ts.forward_passes);               // refilled rows: fewer passes
    }
  }

  TEST_CASE("f32 and bf16 with row-invariant decode steps: dynamic = static = batch size 1 bit for bit (ids and log-probs)") {
    // Decode steps of up to 8 rows run kveval's kernels (f32 on AVX-512, bf16
    // with AVX512-BF16 and no AMX), each row's bits as alone; a pass that also
    // prefills a prompt keeps the prompt on the batch-invariant path and the
    // one-token rows on the kernel. Without that split, decode steps would run
    // through oneDNN in some passes and the kernel in others, and log-probs would
    // differ in their last bits between batch sizes.
    // 128 wide with n_ff 512, so that the [128 -> 1024] gate/up product's
    // summation order distinguishes the kernel from oneDNN (a 64-wide model can
    // sum alike in both, and then this test could not fail).
    const std::string path = wide_model("wide", 512, 6);
    for (auto [dtype, bdt] : {std::pair{ComputeDtype::F32, kveval::backend::Dtype::F32},
                              std::pair{ComputeDtype::BF16, kveval::backend::Dtype::BF16}}) {
      const std::string dt_name = kveval::backend::to_string(bdt);
      CAPTURE(dt_name);
      if (kveval::backend::decode_invariant_rows(bdt) < 8) {
        MESSAGE("SKIPPED: " << std::string(kveval::backend::to_string(bdt)) << " decode steps are not row-invariant on this CPU ("
                            << std::string(kveval::backend::cpu_isa_name()) << ")");
        continue;
      }
      auto m = test::load_context(path, {.threads = 2, .dtype = dtype});
      const Workload w = tiny_workload();
      const int positions = 64;
      const auto ref = alone(*m, w.prompts, w.opts, positions);
      for (int rows : {3, 4, 8}) {
        CAPTURE(rows);
        for (Batching b : {Batching::Dynamic, Batching::Static}) {
          const auto got = batched(*m, w.prompts, w.opts, rows, positions, b);
          REQUIRE(got.size() == ref.size());
          for (size_t i = 0; i < ref.size(); ++i) {
            CAPTURE(i);
            CHECK(got[i].ids == ref[i].ids);
            CHECK(got[i].logprobs == ref[i].logprobs);  // exact
          }
        }
      }
    }
  }

  TEST_CASE("bf16 where its kernel and oneDNN sum alike: dynamic = static = alone bit for bit with steps of 9-11 sequences and n_in over 1024") {
    // Where kveval's bf16 decode kernel and oneDNN's product on the panels sum
    // in one order (be::matmul_rows_invariant), a pass is one product and a
    // sequence's bits do not depend on what shares the pass, even in steps of
    // more than 8 sequences (oneDNN's brgemm). n_ff 1100: the down projection
    // sums two chunks of 1024 rows of Wᵀ. 14 prompts over 11 rows, none
    // stopping early: decode steps of 11 sequences, and dynamic refills that
    // prefill a prompt while 10 rows decode.
    using kveval::backend::Dtype;
    if (!kveval::backend::matmul_rows_invariant(Dtype::BF16)) {
      MESSAGE("SKIPPED: bf16 decode and oneDNN sum in different orders here ("
              << std::string(kveval::backend::cpu_isa_name()) << ")");
      return;
    }
    const std::string path = wide_model("wide_ff", 1100, 7);
    auto m = test::load_context(path, {.threads = 2, .dtype = ComputeDtype::BF16});
    const std::vector<int> lens = {5, 1, 23, 9, 2, 17, 3, 12, 7, 20, 4, 6, 11, 8};
    const std::vector<int> max = {12, 3, 15, 9, 20, 6, 14, 10, 18, 5, 16, 13, 7, 11};
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < lens.size(); ++i)
      prompts.push_back(random_prompt(static_cast<size_t>(lens[i]), 300 + static_cast<uint32_t>(i), 300));
    GenerateOptions opts;
    opts.max_gen_toks = max;
    opts.stop_at_eos = false;
    const int positions = 64;
    const auto ref = alone(*m, prompts, opts, positions);
    for (size_t i = 0; i < ref.size(); ++i) REQUIRE(ref[i].ids.size() == static_cast<size_t>(max[i]));
    for (Batching b : {Batching::Dynamic, Batching::Static}) {
      const auto got = batched(*m, prompts, opts, 11, positions, b);
      REQUIRE(got.size() == ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        CAPTURE(i);
        CHECK(got[i].ids == ref[i].ids);
        CHECK(got[i].logprobs == ref[i].logprobs);  // exact
      }
    }
  }

  TEST_CASE("random model: more prompts than rows, in order; on_admit and on_finish see every prompt once") {
    Context& m = tiny();
    const Workload w = tiny_workload();
    GenerateOptions o = w.opts;
    std::vector<size_t> admitted, finished;
    o.on_admit = [&](size_t i) { admitted.push_back(i); };
    o.on_finish = [&](size_t i, const Generation& g) {
      finished.push_back(i);
      CHECK(g.prompt_tokens == static_cast<int>(w.prompts[i].size()));
    };
    const auto g = batched(m, w.prompts, o, 2, 64, Batching::Dynamic);
    REQUIRE(admitted.size() == w.prompts.size());
    for (size_t i = 0; i < admitted.size(); ++i) CHECK(admitted[i] == i);
    std::vector<size_t> sorted = finished;
    std::sort(sorted.begin(), sorted.end());
    REQUIRE(sorted.size() == w.prompts.size());
    for (size_t i = 0; i < sorted.size(); ++i) CHECK(sorted[i] == i);
    CHECK(finished != sorted);  // short prompts admitted later finish before long earlier ones
  }

  TEST_CASE("a prompt whose logits are NaN ends with an error and does not disturb the others or its row's next prompt") {
    Context& m = poisoned();
    std::vector<std::vector<int32_t>> prompts;
    for (uint32_t i = 0; i < 7; ++i) prompts.push_back(random_prompt(4 + 3 * i, 200 + i, 300));
    prompts[2][3] = kPoison;
    GenerateOptions o;
    o.max_gen_toks = {30};
    o.stop_at_eos = false;
    const auto ref = alone(m, prompts, o, 64);
    for (size_t i = 0; i < ref.size(); ++i) {
      CAPTURE(i);
      if (i == 2) {
        CHECK(ref[i].reason == StopReason::NonFinite);
        CHECK(ref[i].ids.empty());
      } else {
        CHECK(ref[i].reason == StopReason::MaxTokens);
        CHECK(ref[i].ids.size() == 30);
      }
    }
    // batched, the poisoned prompt's row is refilled and nothing leaks into the others
    for (int rows : {2, 3}) {
      CAPTURE(rows);
      check_same(batched(m, prompts, o, rows, 64, Batching::Dynamic), ref);
      check_same(batched(m, prompts, o, rows, 64, Batching::Static), ref);
    }
    GenerateOptions nolp = o;  // the fused scan without log-probs detects it too
    nolp.logprobs = false;
    const auto quick = batched(m, prompts, nolp, 3, 64, Batching::Dynamic);
    CHECK(quick[2].reason == StopReason::NonFinite);
    CHECK(quick[3].ids == ref[3].ids);
  }

  TEST_CASE("no allocation and no primitive creation in a repeated dynamic run (after a warm-up run)") {
    Context& m = tiny();
    const Workload w = tiny_workload();
    GenerateOptions o = w.opts;
    o.batching = Batching::Dynamic;
    KvCacheScope scope(m, 3, 64);
    const auto first = generate_greedy(m, w.prompts, o);  // warm-up: buffers and primitives for every shape
    const ContextStats s0 = m.stats();
    const uint64_t p0 = m.model().primitives_created();
    GenerateTiming t;
    const auto second = generate_greedy(m, w.prompts, o, &t);
    CHECK(t.forward_passes > 50);
    CHECK(m.stats().forward_calls - s0.forward_calls == static_cast<uint64_t>(t.forward_passes));
    CHECK(m.stats().buffer_allocations == s0.buffer_allocations);
    CHECK(m.stats().cache_allocations == s0.cache_allocations);
    CHECK(m.model().primitives_created() == p0);
    check_same(second, first);
  }

  TEST_CASE("dynamic batching refuses what static batching refuses") {
    Context& m = tiny();
    GenerateOptions o;
    CHECK_THROWS_AS(generate_greedy(m, {{1}}, o), CacheError);  // no cache
    KvCacheScope scope(m, 2, 16);
    CHECK_THROWS_WITH_AS(generate_greedy(m, {{1}, random_prompt(17, 1, 300)}, o), doctest::Contains("max_seq_len >= 17"),
                         CacheError);
    CHECK_THROWS_AS(generate_greedy(m, {{1}, {}}, o), ArgumentError);
    o.max_gen_toks = {1, 2};
    CHECK_THROWS_AS(generate_greedy(m, {{1}, {1}, {1}}, o), ArgumentError);
    // a throwing callback propagates; the rows are usable afterwards
    GenerateOptions thrower;
    thrower.max_gen_toks = {3};
    thrower.on_admit = [](size_t i) {
      if (i == 2) throw CacheError("test: injected");
    };
    CHECK_THROWS_WITH_AS(generate_greedy(m, {{1}, {1}, {1}}, thrower), "test: injected", CacheError);
    GenerateOptions three;
    three.max_gen_toks = {3};
    three.stop_at_eos = false;
    const auto g = generate_greedy(m, {{1}, {1}, {1}}, three);
    for (const auto& x : g) CHECK(x.ids.size() == 3);
    CHECK(g[0].ids == g[2].ids);
  }
}

TEST_SUITE("model.dynamic_batching") {
  TEST_CASE("stories260K: dynamic = static = batch size 1 for 10 prompts over 4 rows, stop at '.' for some" *
            kveval::test::needs_model()) {
    Context& m = test::real_context();
    const auto story = m.model().tokenizer().encode(test::reference_cases("rolling")[0]["text"].get<std::string>(), true);
    REQUIRE(story.size() >= 44);
    std::vector<std::vector<int32_t>> prompts;
    const std::vector<int> lens = {1, 7, 40, 3, 44, 12, 1, 25, 5, 33};
    for (int n : lens) prompts.push_back(std::vector<int32_t>(story.begin(), story.begin() + n));
    GenerateOptions o;
    o.max_gen_toks = {120, 1, 30, 200, 5, 64, 0, 90, 2, 150};
    o.should_stop = [](int i, std::span<const int32_t> ids) { return i % 3 == 0 && ids.back() == 426; };  // "."
    const auto ref = alone(m, prompts, o, 256);
    int stops = 0, eos = 0;
    for (const auto& g : ref) {
      stops += g.reason == StopReason::StopString;
      eos += g.reason == StopReason::Eos;
    }
    CHECK(stops >= 1);
    // the greedy continuation of BOS alone is the reference's
    const auto want = test::reference_cases("greedy")[0]["ids"].get<std::vector<int32_t>>();
    REQUIRE(ref[0].ids.size() <= want.size());
    CHECK(std::equal(ref[0].ids.begin(), ref[0].ids.end(), want.begin()));
    for (auto b : {Batching::Dynamic, Batching::Static}) {
      const std::string schedule = to_string(b);
      CAPTURE(schedule);
      GenerateTiming t;
      check_same(batched(m, prompts, o, 4, 256, b, &t), ref);
    }
    MESSAGE("stories260K workload: " << stops << " stop-string and " << eos << " EOS endings");
  }
}
