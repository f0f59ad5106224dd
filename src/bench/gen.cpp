// Dynamic vs static batching of generation: see gen.hpp.
#include "bench/gen.hpp"

#include <algorithm>
#include <optional>
#include <random>

#include <fmt/format.h>

#include "bench/stats.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"

namespace kveval::bench {

int64_t GenMixedWorkload::gen_tokens() const {
  int64_t s = 0;
  for (int m : max_gen_toks) s += m;
  return s;
}

int64_t GenMixedLengths::gen_tokens() const {
  int64_t s = 0;
  for (int m : max_gen_toks) s += m;
  return s;
}

GenMixedLengths gen_mixed_lengths(int n, int max_gen, uint64_t seed, int n_ctx) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> plen(4, 32), glen(1, max_gen);
  GenMixedLengths w;
  for (int i = 0; i < n; ++i) {
    const int p = plen(rng);
    const int drawn = glen(rng), g = std::min(drawn, n_ctx - p);
    w.capped += g < drawn;
    w.prompt_lens.push_back(p);
    w.max_gen_toks.push_back(g);
    w.positions = std::max(w.positions, p + g);
  }
  return w;
}

GenMixedWorkload gen_mixed_workload(const Model& model, int n, int max_gen, uint64_t seed) {
  const int n_ctx = model.hparams().n_ctx_train;
  if (n < 1 || max_gen < 1 || n_ctx < 33)
    throw ArgumentError(fmt::format("gen-mixed: {} prompts, max_gen_toks up to {}, context {} (need >= 1, >= 1, >= 33)",
                                    n, max_gen, n_ctx));
  const GenMixedLengths lens = gen_mixed_lengths(n, max_gen, seed, n_ctx);
  GenMixedWorkload w;
  for (int i = 0; i < n; ++i)
    w.prompts.push_back(synthetic_prompts(model, 1, lens.prompt_lens[static_cast<size_t>(i)],
                                          seed + 1 + static_cast<uint64_t>(i))[0]);
  w.max_gen_toks = lens.max_gen_toks;
  w.positions = lens.positions;
  w.capped = lens.capped;
  return w;
}

namespace {

/// One gen-mixed measurement: both schedules in a `rows`-row cache, interleaved.
struct MixedRun {
  std::vector<double> secs[2];
  int64_t passes[2] = {0, 0};
  std::vector<std::vector<int32_t>> ids[2];
};

MixedRun measure_mixed(const Options& o, Context& ctx, const GenMixedWorkload& w, int rows) {
  const int64_t gen = w.gen_tokens();
  MixedRun m;
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
    if (produced != gen) throw Error(fmt::format("internal: gen-mixed generated {} tokens, {} expected", produced, gen));
    m.passes[k] = t.forward_passes;
    m.ids[k].clear();
    for (auto& x : g) m.ids[k].push_back(std::move(x.ids));
    return s;
  };
  once(0);  // warm-up: primitives and buffers of both schedules
  once(1);
  for (int r = 0; r < o.repetitions; ++r)
    for (int k = 0; k < 2; ++k) m.secs[k].push_back(once(k));
  return m;
}

/// The rows "static", "dynamic" and "speedup" of one measurement.
void add_mixed_rows(Report& rep, const Context& ctx, int threads, const GenMixedWorkload& w, int rows,
                    const MixedRun& m) {
  const int64_t gen = w.gen_tokens();
  size_t differ = 0;
  for (size_t i = 0; i < m.ids[0].size(); ++i) differ += m.ids[0][i] != m.ids[1][i];
  auto row = [&](const char* name) {
    Row r;
    r.test = "gen-mixed";
    r.dtype = to_string(ctx.model().dtype());
    r.matmul = ctx.model().load_summary().matmul;
    r.kv_cache_dtype = to_string(ctx.kv_cache_dtype());
    r.name = name;
    r.threads = threads;
    r.batch = rows;
    r.n_gen = static_cast<int>(gen);
    r.positions = w.positions;
    return r;
  };
  for (int k = 0; k < 2; ++k) {
    Row r = row(k == 0 ? "static" : "dynamic");
    r.unit = "tok/s";
    std::vector<double> tps;
    for (double s : m.secs[k]) tps.push_back(static_cast<double>(gen) / s);
    r.value = summarize(tps);
    r.with("prompts", static_cast<double>(w.prompts.size()))
        .with("forward_passes", static_cast<double>(m.passes[k]))
        .with("seconds", median(m.secs[k]));
    rep.rows.push_back(r);
  }
  Row s = row("speedup");
  s.unit = 'x';  // a char, not "x": GCC 12 warns (false -Wrestrict, bug 105329) on the 1-char literal
  s.value = exact(median(m.secs[0]) / median(m.secs[1]));
  s.with("prompts_with_different_ids", static_cast<double>(differ));
  rep.rows.push_back(s);
}

}  // namespace

void run_gen_mixed(const Options& o, Context& ctx, int threads, Report& rep,
                   const std::function<void(const std::string&)>& say, std::span<const Instance> steps) {
  const Model& model = ctx.model();
  std::optional<GenMixedWorkload> w;
  for (const Instance& step : steps) {
    if (step.kind == Instance::Kind::Warning) {
      rep.add_warning(step.warning);
      continue;
    }
    if (!w) w = gen_mixed_workload(model, o.gen_mixed_prompts, o.gen_mixed_max_gen, o.seed);
    const int rows = step.batch;
    if (say)
      say(fmt::format("[t={}] gen-mixed: {}, {} to generate, {}, static vs dynamic", threads,
                      count_of(w->prompts.size(), "prompt"), count_of(w->gen_tokens(), "token"), count_of(rows, "row")));
    if (ctx.caches_are_setup()) ctx.delete_caches();
    const MemoryPart parts[] = {{"KV cache", ctx.cache_bytes_for(rows, w->positions)},
                                {"activations", model.activation_bytes_for(rows, w->positions, false)}};
    const std::string dtype = o.dtypes.size() > 1 ? fmt::format(" with --dtype {}", to_string(model.dtype())) : "";
    if (!fits_budget(rep, fmt::format("gen-mixed batch {}{}", rows, dtype), parts)) continue;
    const MixedRun m = measure_mixed(o, ctx, *w, rows);
    ctx.delete_caches();
    add_mixed_rows(rep, ctx, threads, *w, rows, m);
  }
  if (!w) return;  // skipped: the context cannot hold the workload
  rep.add_note(fmt::format(
      "gen-mixed: {} prompts of 4-32 tokens, max_gen_toks uniform in [1, {}] (seed {}, unsorted), EOS ignored, no log-probs (as kveval run); "
      "tok/s = generated tokens / wall time of generate_greedy (prefill included) in a cache of `batch` rows; static: "
      "groups of `batch` prompts decode until their longest row ends; dynamic: a finished row is rewound and refilled "
      "with the next prompt in the pass where the others decode; speedup = static / dynamic median seconds; '@N': "
      "the cache's positions per row (the longest prompt plus the largest max_gen_toks).",
      o.gen_mixed_prompts, o.gen_mixed_max_gen, o.seed));
}

}  // namespace kveval::bench
