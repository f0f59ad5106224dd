// `kveval bench` tests of the KV-cache lifecycle: "cache" (set-up, reset,
// teardown per shape) and "switch" (RL-style alternation of generation and
// scoring under both cache policies).
#include <algorithm>
#include <array>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "bench/ctx.hpp"
#include "util/error.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"

namespace kveval::bench::detail {

// ---- cache lifecycle ------------------------------------------------------------

namespace {

/// The cache lifecycle at one shape: setup, first and steady write, reset, delete, and a scope under both policies.
void measure_cache(Ctx& c, int b, int pos) {
  const int64_t V = c.hp.n_vocab;
  c.say(fmt::format("cache lifecycle batch {} positions {}", b, pos));
  const auto prompts = synthetic_prompts(c.model, b, 2, c.o.seed);
  std::vector<int32_t> tokens;
  for (const auto& p : prompts) tokens.push_back(p[1]);
  std::vector<int> n_tokens(static_cast<size_t>(b), 1);
  std::vector<float> logits(static_cast<size_t>(b * V));
  std::vector<double> setup, first, steady, reset, del, bytes;
  constexpr int kResets = 1000;
  repeat(c.o.repetitions, [&] {
    drop_caches(c.context);
    Stopwatch sw;
    c.context.setup_caches(b, pos);
    setup.push_back(sw.seconds());
    bytes.push_back(static_cast<double>(c.context.bytes()));
    sw.reset();
    c.context.forward(tokens, b, 1, n_tokens, Context::Logits::Last, logits);
    first.push_back(sw.seconds());
    c.context.reset_caches();
    sw.reset();
    c.context.forward(tokens, b, 1, n_tokens, Context::Logits::Last, logits);
    steady.push_back(sw.seconds());
    sw.reset();
    for (int i = 0; i < kResets; ++i) c.context.reset_caches();
    reset.push_back(sw.seconds() / kResets);
    sw.reset();
    c.context.delete_caches();
    del.push_back(sw.seconds());
    return 0.0;
  });
  for (auto* v : {&setup, &first, &steady, &reset, &del, &bytes}) v->erase(v->begin());  // warm-up
  std::vector<double> sd;
  for (size_t i = 0; i < setup.size(); ++i) sd.push_back(setup[i] + del[i]);
  auto add = [&](const std::string& name, const std::vector<double>& secs) {
    Row r = c.row("cache", name);
    r.batch = b;
    r.positions = pos;
    r.unit = "us";
    r.value = summarize(map_samples(secs, us));
    r.with("cache_MiB", bytes.back() / 1048576.0);
    c.rep.rows.push_back(r);
  };
  add("setup_caches", setup);
  add("first write", first);
  add("steady write", steady);
  add("reset_caches", reset);
  add("delete_caches", del);
  add("setup+delete", sd);

  // KvCacheScope enter + leave, both policies.
  std::vector<double> rel = repeat(c.o.repetitions, [&] {
    Stopwatch sw;
    { KvCacheScope s(c.context, b, pos, CachePolicy::Release); }
    return sw.seconds();
  });
  c.context.setup_caches(b, pos);  // the allocation Reuse keeps
  c.context.set_caches_enabled(false);
  std::vector<double> reu = repeat(c.o.repetitions, [&] {
    Stopwatch sw;
    { KvCacheScope s(c.context, b, pos, CachePolicy::Reuse); }
    return sw.seconds();
  });
  drop_caches(c.context);
  add("scope enter+leave (release)", rel);
  add("scope enter+leave (reuse)", reu);
}

}  // namespace

void run_cache(Ctx& c, Steps steps) {
  drop_caches(c.context);
  for (const Instance& step : steps) {
    if (step.kind == Instance::Kind::Warning) {
      c.warn(step.warning);
      continue;
    }
    const int b = step.batch, pos = step.positions;
    if (!c.fits(fmt::format("cache {}x{}", b, pos),
                {{"KV cache", c.context.cache_bytes_for(b, pos)}, {"activations", c.model.activation_bytes_for(b, 1, false)}}))
      continue;
    measure_cache(c, b, pos);
  }
  c.note("cache: setup_caches allocates without zero-fill; 'first write' is a one-token forward of every row right "
         "after setup (its pages are touched then), 'steady write' the same forward after reset_caches; "
         "reset_caches is the mean of 1000 calls; scope rows time constructing and destroying a KvCacheScope.");
}

// ---- switch -----------------------------------------------------------------

namespace {

/// One round of switch: its parts' seconds.
struct Round {
  double enter, generate, exit, score;
};

/// The timed rounds of switch under `policy` (after two warm-up rounds) as a row.
Row switch_policy(Ctx& c, CachePolicy policy, int b, int p, int g) {
  const auto prompts = synthetic_prompts(c.model, b, p, c.o.seed);
  GenerateOptions gopts;
  gopts.max_gen_toks = {g};
  gopts.stop_at_eos = false;
  c.say(fmt::format("switch: {}, policy {}", count_of(c.o.switch_rounds, "round"), to_string(policy)));
  drop_caches(c.context);
  auto round = [&] {
    Round r{};
    Stopwatch sw;
    std::optional<KvCacheScope> scope;
    scope.emplace(c.context, b, p + g, policy);
    r.enter = sw.seconds();
    sw.reset();
    auto gens = generate_greedy(c.context, prompts, gopts);
    r.generate = sw.seconds();
    require_whole(gens, std::vector<int>(gens.size(), g), "switch's generation");
    sw.reset();
    scope.reset();
    r.exit = sw.seconds();
    sw.reset();
    std::vector<ScoreRequest> reqs(static_cast<size_t>(b));
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].tokens = prompts[i];
      reqs[i].tokens.insert(reqs[i].tokens.end(), gens[i].ids.begin(), gens[i].ids.end());
      reqs[i].score_from = p;
    }
    score(c.context, reqs, b);
    r.score = sw.seconds();
    return r;
  };
  round();  // warm-up: first allocations and primitives
  round();
  const uint64_t prims0 = c.model.primitives_created();
  const ContextStats s0 = c.context.stats();
  std::vector<Round> rounds;
  for (int k = 0; k < c.o.switch_rounds; ++k) rounds.push_back(round());
  const ContextStats s1 = c.context.stats();
  const uint64_t prims1 = c.model.primitives_created();
  drop_caches(c.context);
  std::vector<double> share, enter, exit_, gen, sc, total;
  for (const auto& r : rounds) {
    const double t = r.enter + r.generate + r.exit + r.score;
    share.push_back(100.0 * (r.enter + r.exit) / t);
    enter.push_back(us(r.enter));
    exit_.push_back(us(r.exit));
    gen.push_back(r.generate * 1e3);
    sc.push_back(r.score * 1e3);
    total.push_back(t * 1e3);
  }
  Row r = c.row("switch", to_string(policy));
  r.batch = b;
  r.n_prompt = p;
  r.n_gen = g;
  r.unit = '%';  // a char, not "%": GCC 12 warns (false -Wrestrict, bug 105329) on the 1-char literal
  r.value = summarize(share);
  r.with("enter_us", median(enter))
      .with("leave_us", median(exit_))
      .with("generate_ms", median(gen))
      .with("score_ms", median(sc))
      .with("round_ms", median(total))
      .with("new_primitives", static_cast<double>(prims1 - prims0))
      .with("cache_allocations", static_cast<double>(s1.cache_allocations - s0.cache_allocations))
      .with("buffer_allocations", static_cast<double>(s1.buffer_allocations - s0.buffer_allocations));
  return r;
}

}  // namespace

void run_switch(Ctx& c, Steps steps) {
  for (const Instance& step : steps) {
    if (step.kind == Instance::Kind::Warning) {  // capped sizes, or a context too short to run it
      c.warn(step.warning);
      continue;
    }
    const int b = step.batch, p = step.n_prompt, g = step.n_gen;
    // The scope's cache, and the larger of the generation's prefill and the scoring of
    // prompt + generation (logits of the g scored positions per row); under reuse the
    // cache is still held while scoring.
    drop_caches(c.context);
    const int64_t rows = b;
    const size_t acts = std::max(c.model.activation_bytes_for(b, p, false),
                                 c.model.activation_bytes_for(b, p + g - 1, false, rows * (p + g - 1), rows * g));
    if (!c.fits(fmt::format("switch batch {} x {} positions", b, p + g),
                {{"KV cache", c.context.cache_bytes_for(b, p + g)}, {"activations", acts}}))
      return;
    for (CachePolicy policy : {CachePolicy::Release, CachePolicy::Reuse})
      c.rep.rows.push_back(switch_policy(c, policy, b, p, g));
    c.note("switch: each round enters a KvCacheScope(batch, P+G), generates G tokens per row, leaves the scope, then "
           "scores the same rows cache-free; value = share of the round spent entering+leaving the scope (median over "
           "rounds); counters are new oneDNN primitives and allocations over the timed rounds after two warm-up rounds "
           "(release allocates once per round by design; reuse should allocate nothing).");
  }
}

}  // namespace kveval::bench::detail
