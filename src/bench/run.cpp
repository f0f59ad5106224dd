// `kveval bench`: option checks, the helpers its tests share (synthetic prompts,
// bench_generate) and run_bench (model_facts, plan, then execute: plan.hpp).
#include "bench/run.hpp"

#include <algorithm>
#include <functional>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "backend/roofline.hpp"
#include "model/cost.hpp"
#include "bench/ctx.hpp"
#include "bench/fidelity.hpp"
#include "bench/gen.hpp"
#include "bench/load.hpp"
#include "bench/plan.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/number_format.hpp"
#include "util/timer.hpp"

namespace kveval::bench {

using namespace detail;  // Ctx, repeat, run_cache, run_switch (ctx.hpp)

const std::vector<std::string>& test_names() {
  static const std::vector<std::string> names = {"roofline", "pp",  "tg",   "tg-nocache", "cache",
                                                 "switch",   "ll",  "mc",  "load", "dequant", "fidelity", "gen-mixed"};
  return names;
}

/// Tests that run only when named in --tests (load reloads the model many times).
static bool opt_in(const std::string& t) {
  return t == "load" || t == "dequant" || t == "fidelity" || t == "gen-mixed" || t == "mc";
}

std::vector<std::string> detail::default_tests() {
  std::vector<std::string> v;
  for (const auto& t : test_names())
    if (!opt_in(t)) v.push_back(t);
  return v;
}

namespace {

void require_list(const std::vector<int>& v, const char* opt, int max) {
  if (v.empty()) throw ArgumentError(fmt::format("{}: needs at least one value", opt));
  for (int x : v)
    if (x < 1 || x > max) throw ArgumentError(fmt::format("{}: values must be in [1, {}], got {}", opt, max, x));
}

}  // namespace

bool detail::selected(const Options& o, const std::string& t) {
  if (o.tests.empty()) return !opt_in(t);
  return std::find(o.tests.begin(), o.tests.end(), t) != o.tests.end();
}

void validate(const Options& o) {
  if (o.model_path.empty()) throw ArgumentError("--model: a GGUF model path is required");
  // Same bounds as `kveval run` for threads and rows; lengths are capped by the model's context later.
  require_list(o.threads, "--threads", 4096);
  require_list(o.batches, "--batch-size", 4096);
  require_list(o.n_prompt, "--n-prompt", 1 << 20);
  require_list(o.n_gen, "--n-gen", 1 << 20);
  require_list(o.tg_prompt, "--tg-prompt", 1 << 20);
  if (o.repetitions < 1 || o.repetitions > 100000)
    throw ArgumentError(fmt::format("--repetitions: must be in [1, 100000], got {}", o.repetitions));
  for (const auto& t : o.tests)
    if (std::find(test_names().begin(), test_names().end(), t) == test_names().end())
      throw ArgumentError(fmt::format("--tests: unknown test '{}' (expected some of {})", t, fmt::join(test_names(), ",")));
  for (const auto& s : o.cache_shapes)
    if (s[0] < 1 || s[1] < 1) throw ArgumentError(fmt::format("--cache-shapes: {}x{} must be >= 1x1", s[0], s[1]));
  // Upper bounds keep a typo from reserving gigabytes before the memory checks can
  // name it: rows as --batch-size, token counts as --n-gen, counts of requests and
  // rounds at 10^6.
  struct Bound {
    int v;
    const char* name;
    int hi;
  };
  for (const Bound& b : {Bound{o.switch_rounds, "--switch-rounds", 1000000}, Bound{o.switch_batch, "--switch-batch", 4096},
                         Bound{o.switch_prompt, "--switch-prompt", 1 << 20}, Bound{o.switch_gen, "--switch-gen", 1 << 20},
                         Bound{o.ll_requests, "--ll-requests", 1000000},
                         Bound{o.gen_mixed_prompts, "--gen-mixed-prompts", 1000000},
                         Bound{o.gen_mixed_max_gen, "--gen-mixed-max-gen", 1 << 20},
                         Bound{o.gen_mixed_rows, "--gen-mixed-rows", 4096}, Bound{o.mc.docs, "--mc-docs", 1000000},
                         Bound{o.mc.prefix, "--mc-prefix", 1 << 20}, Bound{o.mc.context, "--mc-context", 1 << 20},
                         Bound{o.mc.choices, "--mc-choices", 4096}, Bound{o.mc.choice_tokens, "--mc-choice-tokens", 1 << 20}})
    if (b.v < 1 || b.v > b.hi) throw ArgumentError(fmt::format("{}: must be in [1, {}], got {}", b.name, b.hi, b.v));
  // mc's request list holds every request's tokens: docs x choices requests of prefix + context + choice tokens
  const int64_t mc_requests = int64_t(o.mc.docs) * o.mc.choices;
  const int64_t mc_tokens = mc_requests * (int64_t(o.mc.prefix) + o.mc.context + o.mc.choice_tokens);
  if (mc_requests > 1000000 || mc_tokens > (int64_t(1) << 26))
    throw ArgumentError(fmt::format("--mc-docs {} x --mc-choices {}: {} requests of {} tokens in all; at most 1000000 "
                                    "requests and 67108864 tokens",
                                    o.mc.docs, o.mc.choices, mc_requests, mc_tokens));
  if (o.kv_cache_dtypes.empty()) throw ArgumentError("--kv-cache-dtype: expected at least one value");
  for (const auto& k : o.kv_cache_dtypes) parse_kv_cache_dtype(k, "--kv-cache-dtype");  // a bad name fails first
  if (o.kv_cache_dtypes.size() > 1 && std::find(o.tests.begin(), o.tests.end(), "fidelity") != o.tests.end())
    throw ArgumentError(fmt::format("--kv-cache-dtype {}: --tests fidelity takes one KV-cache type (it compares compute "
                                    "dtypes); run it on its own",
                                    fmt::join(o.kv_cache_dtypes, ",")));
  if (o.matmul.empty()) throw ArgumentError("--matmul: expected at least one of exact, int8");
  for (const auto& m : o.matmul) parse_matmul_mode(m, "--matmul");
  if (o.stream_bytes != 0 && o.stream_bytes < 4096)
    throw ArgumentError(fmt::format("--stream-mib: buffer of {} bytes is too small", o.stream_bytes));
  if (o.stream_bytes > (size_t(2) << 30))
    throw ArgumentError(fmt::format("--stream-mib: at most 2048 MiB, got {} MiB", o.stream_bytes >> 20));
}

size_t fit_stream_buffer(size_t wanted, std::optional<uint64_t> available, size_t least) {
  if (!available || wanted <= *available) return wanted;
  const size_t mib = size_t{1} << 20;
  const size_t fits = static_cast<size_t>(*available / 8 * 7) / mib * mib;  // 1/8 left for the rest of the process
  return fits >= least && fits >= mib ? fits : 0;
}

std::vector<std::vector<int32_t>> synthetic_prompts(const Model& model, int batch, int n_prompt, uint64_t seed) {
  if (batch < 1 || n_prompt < 1) throw ArgumentError(fmt::format("synthetic_prompts: batch {} x {} tokens", batch, n_prompt));
  const int32_t V = model.hparams().n_vocab, bos = model.tokenizer().bos(), eos = model.tokenizer().eos();
  if (V < 5) throw ArgumentError(fmt::format("synthetic_prompts: vocabulary of {} tokens is too small", V));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> id(3, V - 1);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(batch));
  for (auto& row : out) {
    row.push_back(bos);
    while (static_cast<int>(row.size()) < n_prompt) {
      const int32_t t = id(rng);
      if (t != bos && t != eos) row.push_back(t);
    }
  }
  return out;
}

std::vector<std::vector<int32_t>> bench_generate(Context& ctx, const std::vector<std::vector<int32_t>>& prompts,
                                                 int n_gen, bool cached, GenerateTiming* timing) {
  const Model& model = ctx.model();
  if (prompts.empty()) throw ArgumentError("bench_generate: no prompts");
  const size_t p = prompts[0].size();
  for (const auto& r : prompts)
    if (r.size() != p) throw ArgumentError("bench_generate: prompts must all have the same length");
  const int total = static_cast<int>(p) + n_gen;
  if (n_gen < 1 || total > model.hparams().n_ctx_train)
    throw ArgumentError(fmt::format("bench_generate: {} prompt + {} generated tokens outside [1, context length {}]", p,
                                    n_gen, model.hparams().n_ctx_train));
  GenerateOptions opts;
  opts.max_gen_toks = {n_gen};
  opts.stop_at_eos = false;
  std::vector<Generation> gens;
  if (cached) {
    KvCacheScope scope(ctx, static_cast<int>(prompts.size()), total, CachePolicy::Reuse);
    gens = generate_greedy(ctx, prompts, opts, timing);
  } else {
    if (ctx.caches_are_enabled()) ctx.set_caches_enabled(false);
    gens = generate_greedy_uncached(ctx, prompts, opts, total, timing);
  }
  require_whole(gens, std::vector<int>(gens.size(), n_gen), cached ? "cached generation" : "uncached generation");
  std::vector<std::vector<int32_t>> ids;
  for (auto& g : gens) ids.push_back(std::move(g.ids));
  return ids;
}

void require_whole(const std::vector<Generation>& gens, const std::vector<int>& expected, const std::string& what) {
  for (size_t r = 0; r < gens.size() && r < expected.size(); ++r) {
    const Generation& g = gens[r];
    if (static_cast<int>(g.ids.size()) >= expected[r]) continue;
    const std::string why = g.reason == StopReason::NonFinite ? "non-finite logits (NaN or Inf)" : to_string(g.reason);
    throw MeasurementError(fmt::format("{} stopped after {} of {} in row {}: {}{}", what, g.ids.size(),
                                       count_of(expected[r], "token"), r, why,
                                       g.kv_f16_overflows > 0 ? " (" + kv_f16_overflow_note(g.kv_f16_overflows) + ")"
                                                              : std::string()));
  }
}

Report run_bench(const Options& o, const std::function<void(const std::string&)>& progress,
                 const std::function<void(const std::string&)>& info) {
  validate(o);
  std::optional<eval::EvalSpec> fidelity_spec;  // read before the model file
  if (selected(o, "fidelity")) fidelity_spec = load_fidelity_spec(o);
  const ModelFacts facts = model_facts(o);
  // One pass per --matmul mode; fidelity runs once (exact against int8 when int8 is listed).
  const std::string fidelity_pass =
      std::find(o.matmul.begin(), o.matmul.end(), "int8") != o.matmul.end() ? "int8" : o.matmul.front();
  Report rep;
  for (size_t i = 0; i < o.matmul.size(); ++i) {
    Options one = o;
    one.matmul = {o.matmul[i]};
    std::vector<Instance> steps = plan(one, facts);
    if (o.matmul[i] != fidelity_pass) std::erase_if(steps, [](const Instance& s) { return s.test == "fidelity"; });
    if (o.matmul.size() > 1 && progress) progress(fmt::format("--matmul {}", o.matmul[i]));
    Report r = execute(one, facts, steps, o.matmul[i] == fidelity_pass ? fidelity_spec : std::nullopt, progress, info);
    if (i == 0) {
      rep = std::move(r);
      continue;
    }
    for (Row& row : r.rows) rep.rows.push_back(std::move(row));
    for (const auto& n : r.notes) rep.add_note(n);
    for (const auto& w : r.warnings) rep.add_warning(w);
    rep.meta["machine"]["loadavg_end"] = r.meta["machine"]["loadavg_end"];
  }
  rep.meta["options"]["matmul"] = o.matmul;
  return rep;
}

}  // namespace kveval::bench
