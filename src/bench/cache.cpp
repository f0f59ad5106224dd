// `kveval bench` tests of the KV-cache lifecycle: "cache" (set-up, reset,
// teardown per shape) and "switch" (RL-style alternation of generation and
// scoring under both cache policies).
#include <algorithm>
#include <array>
#include <vector>

#include <fmt/format.h>

#include "bench/ctx.hpp"
#include "util/error.hpp"
#include "util/timer.hpp"

namespace kveval::bench::detail {

// ---- cache lifecycle ------------------------------------------------------------

void run_cache(Ctx& c) {
  drop_caches(c.context);
  const int64_t V = c.hp.n_vocab;
  std::vector<std::array<int, 2>> done;  // shapes after capping: 2x200 and 2x128 at context 128 measure once
  for (const auto& shape : c.o.cache_shapes) {
    const int b = shape[0];
    int pos = shape[1];
    if (pos > c.hp.n_ctx_train) {
      c.warn(fmt::format("cache: {} positions capped at the model's context length {}", pos, c.hp.n_ctx_train));
      pos = c.hp.n_ctx_train;
    }
    if (std::find(done.begin(), done.end(), std::array<int, 2>{b, pos}) != done.end()) continue;
    done.push_back({b, pos});
    if (!c.fits(fmt::format("cache {}x{}", b, pos),
                {{"KV cache", c.context.cache_bytes_for(b, pos)}, {"activations", c.model.activation_bytes_for(b, 1, false)}}))
      continue;
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
  c.note("cache: setup_caches allocates without zero-fill; 'first write' is a one-token forward of every row right "
         "after setup (its pages are touched then), 'steady write' the same forward after reset_caches; "
         "reset_caches is the mean of 1000 calls; scope rows time constructing and destroying a KvCacheScope.");
}

// ---- switch -----------------------------------------------------------------

void run_switch(Ctx& c) {
  const int b = c.o.switch_batch;
  if (c.hp.n_ctx_train < 2) {
    c.warn(fmt::format("switch skipped: a round needs 2 positions (a 1-token prompt and 1 generated token) but the "
                       "model's context length is {}",
                       c.hp.n_ctx_train));
    return;
  }
  const int p = std::min(c.o.switch_prompt, c.hp.n_ctx_train - 1);
  const int g = std::min(c.o.switch_gen, c.hp.n_ctx_train - p);
  if (p != c.o.switch_prompt || g != c.o.switch_gen)
    c.warn(fmt::format("switch: --switch-prompt {} and --switch-gen {} capped to {} and {} (context length {})",
                       c.o.switch_prompt, c.o.switch_gen, p, g, c.hp.n_ctx_train));
  // The scope's cache, and the larger of the generation's prefill and the scoring of
  // prompt + generation (all logits); under reuse the cache is still held while scoring.
  drop_caches(c.context);
  const size_t acts = std::max(c.model.activation_bytes_for(b, p, false), c.model.activation_bytes_for(b, p + g - 1, true));
  if (!c.fits(fmt::format("switch batch {} x {} positions", b, p + g),
              {{"KV cache", c.context.cache_bytes_for(b, p + g)}, {"activations", acts}}))
    return;
  const auto prompts = synthetic_prompts(c.model, b, p, c.o.seed);
  GenerateOptions gopts;
  gopts.max_gen_toks = {g};
  gopts.stop_at_eos = false;
  for (CachePolicy policy : {CachePolicy::Release, CachePolicy::Reuse}) {
    c.say(fmt::format("switch: {} rounds, policy {}", c.o.switch_rounds, to_string(policy)));
    drop_caches(c.context);
    struct Round {
      double enter, generate, exit, score;
    };
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
      for (int i = 0; i < b; ++i) {
        reqs[static_cast<size_t>(i)].tokens = prompts[static_cast<size_t>(i)];
        const auto& ids = gens[static_cast<size_t>(i)].ids;
        reqs[static_cast<size_t>(i)].tokens.insert(reqs[static_cast<size_t>(i)].tokens.end(), ids.begin(), ids.end());
        reqs[static_cast<size_t>(i)].score_from = p;
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
    c.rep.rows.push_back(r);
  }
  c.note("switch: each round enters a KvCacheScope(batch, P+G), generates G tokens per row, leaves the scope, then "
         "scores the same rows cache-free; value = share of the round spent entering+leaving the scope (median over "
         "rounds); counters are new oneDNN primitives and allocations over the timed rounds after two warm-up rounds "
         "(release allocates once per round by design; reuse should allocate nothing).");
}

}  // namespace kveval::bench::detail
