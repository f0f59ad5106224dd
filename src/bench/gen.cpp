// Dynamic vs static batching of generation: see gen.hpp.
#include "bench/gen.hpp"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "bench/stats.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"
#include "util/timer.hpp"

namespace kveval::bench {

int64_t GenMixedWorkload::gen_tokens() const {
  int64_t s = 0;
  for (int m : max_gen_toks) s += m;
  return s;
}

GenMixedWorkload gen_mixed_workload(const Model& model, int n, int max_gen, uint64_t seed) {
  const int n_ctx = model.hparams().n_ctx_train;
  if (n < 1 || max_gen < 1 || n_ctx < 33)
    throw ArgumentError(fmt::format("gen-mixed: {} prompts, max_gen_toks up to {}, context {} (need >= 1, >= 1, >= 33)",
                                    n, max_gen, n_ctx));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> plen(4, 32), glen(1, max_gen);
  GenMixedWorkload w;
  for (int i = 0; i < n; ++i) {
    const int p = plen(rng);
    const int drawn = glen(rng), g = std::min(drawn, n_ctx - p);
    w.capped += g < drawn;
    w.prompts.push_back(synthetic_prompts(model, 1, p, seed + 1 + static_cast<uint64_t>(i))[0]);
    w.max_gen_toks.push_back(g);
    w.positions = std::max(w.positions, p + g);
  }
  return w;
}

void run_gen_mixed(const Options& o, Context& ctx, int threads, Report& rep,
                   const std::function<void(const std::string&)>& say) {
  const Model& model = ctx.model();
  if (model.hparams().n_ctx_train < 33) {  // gen_mixed_workload's prompts: up to 32 tokens, then >= 1 generated
    rep.add_warning(fmt::format("gen-mixed skipped: its prompts of up to 32 tokens and at least 1 generated token need "
                                "a context length of at least 33, but the model's is {}",
                                model.hparams().n_ctx_train));
    return;
  }
  const GenMixedWorkload w = gen_mixed_workload(model, o.gen_mixed_prompts, o.gen_mixed_max_gen, o.seed);
  std::vector<int> row_counts;
  for (int b : o.batches)
    if (b >= 2) row_counts.push_back(b);
  if (row_counts.empty()) row_counts.push_back(o.gen_mixed_rows);
  const int64_t gen = w.gen_tokens();
  if (w.capped > 0)
    rep.add_warning(fmt::format("gen-mixed: max_gen_toks of {} of {} prompts capped so that prompt + generation fits "
                                "the context length {} (--gen-mixed-max-gen {})",
                                w.capped, w.prompts.size(), model.hparams().n_ctx_train, o.gen_mixed_max_gen));
  for (int rows : row_counts) {
    rows = std::min(rows, static_cast<int>(w.prompts.size()));
    if (say)
      say(fmt::format("[t={}] gen-mixed: {} prompts, {} tokens to generate, {} rows, static vs dynamic", threads,
                      w.prompts.size(), gen, rows));
    if (ctx.caches_are_setup()) ctx.delete_caches();
    const MemoryPart parts[] = {{"KV cache", ctx.cache_bytes_for(rows, w.positions)},
                                {"activations", model.activation_bytes_for(rows, w.positions, false)}};
    const std::string dtype = o.dtypes.size() > 1 ? fmt::format(" with --dtype {}", to_string(model.dtype())) : "";
    if (!fits_budget(rep, fmt::format("gen-mixed batch {}{}", rows, dtype), parts)) continue;
    std::vector<double> secs[2];
    int64_t passes[2] = {0, 0};
    std::vector<std::vector<int32_t>> ids[2];
    {
      KvCacheScope scope(ctx, rows, w.positions, CachePolicy::Reuse);
      auto once = [&](int k) {
        GenerateOptions go;
        go.max_gen_toks = w.max_gen_toks;
        go.stop_at_eos = false;
        go.logprobs = false;  // as in `kveval run`
        go.batching = k == 0 ? Batching::Static : Batching::Dynamic;
        GenerateTiming t;
        Stopwatch sw;
        std::vector<Generation> g = generate_greedy(ctx, w.prompts, go, &t);
        const double s = sw.seconds();
        require_whole(g, w.max_gen_toks, k == 0 ? "gen-mixed's static generation" : "gen-mixed's dynamic generation");
        int64_t produced = 0;
        for (const auto& x : g) produced += static_cast<int64_t>(x.ids.size());
        if (produced != gen)
          throw Error(fmt::format("internal: gen-mixed generated {} tokens, {} expected", produced, gen));
        passes[k] = t.forward_passes;
        ids[k].clear();
        for (auto& x : g) ids[k].push_back(std::move(x.ids));
        return s;
      };
      once(0);  // warm-up: primitives and buffers of both schedules
      once(1);
      for (int r = 0; r < o.repetitions; ++r)
        for (int k = 0; k < 2; ++k) secs[k].push_back(once(k));
    }
    ctx.delete_caches();
    size_t differ = 0;
    for (size_t i = 0; i < ids[0].size(); ++i) differ += ids[0][i] != ids[1][i];
    for (int k = 0; k < 2; ++k) {
      Row r;
      r.test = "gen-mixed";
      r.dtype = to_string(model.dtype());
      r.kv_cache_dtype = to_string(ctx.kv_cache_dtype());
      r.name = k == 0 ? "static" : "dynamic";
      r.threads = threads;
      r.batch = rows;
      r.n_gen = static_cast<int>(gen);
      r.positions = w.positions;
      r.unit = "tok/s";
      std::vector<double> tps;
      for (double s : secs[k]) tps.push_back(static_cast<double>(gen) / s);
      r.value = summarize(tps);
      r.with("prompts", static_cast<double>(w.prompts.size()))
          .with("forward_passes", static_cast<double>(passes[k]))
          .with("seconds", median(secs[k]));
      rep.rows.push_back(r);
    }
    Row s;
    s.test = "gen-mixed";
    s.dtype = to_string(model.dtype());
    s.kv_cache_dtype = to_string(ctx.kv_cache_dtype());
    s.name = "speedup";
    s.threads = threads;
    s.batch = rows;
    s.n_gen = static_cast<int>(gen);
    s.positions = w.positions;
    s.unit = "x";
    s.value = exact(median(secs[0]) / median(secs[1]));
    s.with("prompts_with_different_ids", static_cast<double>(differ));
    rep.rows.push_back(s);
  }
  rep.add_note(fmt::format(
      "gen-mixed: {} prompts of 4-32 tokens, max_gen_toks uniform in [1, {}] (seed {}, unsorted), EOS ignored, no log-probs (as kveval run); "
      "tok/s = generated tokens / wall time of generate_greedy (prefill included) in a cache of `batch` rows; static: "
      "groups of `batch` prompts decode until their longest row ends; dynamic: a finished row is rewound and refilled "
      "with the next prompt in the pass where the others decode; speedup = static / dynamic median seconds; '@N': "
      "the cache's positions per row (the longest prompt plus the largest max_gen_toks).",
      w.prompts.size(), o.gen_mixed_max_gen, o.seed));
}

}  // namespace kveval::bench
