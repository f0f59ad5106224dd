// The measurements of `kveval bench` (see run.hpp).
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
#include "util/error.hpp"
#include "util/hash.hpp"
#include "util/timer.hpp"

namespace kveval::bench {

using namespace detail;  // Ctx, repeat, run_cache, run_switch (ctx.hpp)

const std::vector<std::string>& test_names() {
  static const std::vector<std::string> names = {"roofline", "pp",  "tg",   "tg-nocache", "cache",
                                                 "switch",   "ll",  "load", "dequant", "fidelity", "gen-mixed"};
  return names;
}

/// Tests that run only when named in --tests (load reloads the model many times).
static bool opt_in(const std::string& t) { return t == "load" || t == "dequant" || t == "fidelity" || t == "gen-mixed"; }

/// The tests an empty --tests runs.
static std::vector<std::string> default_tests() {
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

bool selected(const Options& o, const std::string& t) {
  if (o.tests.empty()) return !opt_in(t);
  return std::find(o.tests.begin(), o.tests.end(), t) != o.tests.end();
}

// ---- roofline -------------------------------------------------------------

void run_roofline(Ctx& c) {
  c.roofline = true;
  const size_t wanted = c.o.stream_bytes ? c.o.stream_bytes : backend::stream_buffer_bytes();
  const size_t llc = backend::last_level_cache_bytes(), mib = size_t{1} << 20;
  const size_t least = llc ? 4 * llc : 256 * mib;  // stream_buffer_bytes' margin over the cache
  const MemoryBudget budget = memory_budget();
  const size_t bytes = fit_stream_buffer(wanted, budget.available, least);
  if (bytes == 0) {
    c.fits("roofline stream read", {{"stream buffer", wanted}},
           fmt::format("a buffer that fits would be below {} MiB ({}), too small to measure memory rather than cache",
                       least >> 20, llc ? "4 x the last-level cache" : "the default when the last-level cache is unknown"),
           budget);
  } else {
    if (bytes < wanted)
      c.warn(fmt::format("roofline: stream buffer shrunk from {} MiB to {} MiB to fit the {} available ({}); still at "
                         "least {} MiB ({})",
                         wanted >> 20, bytes >> 20, format_bytes(*budget.available), budget.source, least >> 20,
                         llc ? "4 x the last-level cache" : "the default when the last-level cache is unknown"));
    c.say(fmt::format("roofline: stream read over {} MiB", bytes >> 20));
    c.stream = backend::stream_read_bandwidth(c.threads, bytes, std::max(3, c.o.repetitions));
    Row r = c.row("roofline", "stream read");
    r.unit = "GB/s";
    r.value = exact(c.stream->best_gb_per_s);
    r.with("median_GB_per_s", c.stream->median_gb_per_s).with("buffer_MiB", static_cast<double>(c.stream->buffer_bytes >> 20));
    c.rep.rows.push_back(r);
  }
  c.sgemm_at(1);
  c.note("roofline: 'stream read' is the best of the passes summing a float buffer larger than the last-level cache "
         "(1e9 bytes/s); 'sgemm m=M' is oneDNN f32 matmul over the model's weight shapes (7 per layer + output) "
         "with M rows, weights pre-reordered, median pass; both are measured again for each --dtype, just before "
         "its tests (the dtype in a roofline row names those tests; pp's frac_of_sgemm divides by it), and sgemm is "
         "f32 whatever the dtype; tg's frac_of_stream divides by a stream read over a buffer of the same size taken "
         "just before each of its repetitions (see tg).");
}

// ---- pp ---------------------------------------------------------------------

void run_pp(Ctx& c) {
  drop_caches(c.context);
  const int64_t V = c.hp.n_vocab;
  for (int b : c.o.batches) {
    for (int p : c.o.n_prompt) {
      if (p > c.hp.n_ctx_train) {
        c.warn(fmt::format("pp{} skipped: longer than the context length {}", p, c.hp.n_ctx_train));
        continue;
      }
      const size_t tokens_bv = static_cast<size_t>(b) * static_cast<size_t>(p) * static_cast<size_t>(V);
      if (!c.fits(fmt::format("pp{} batch {}", p, b),
                  {{"logits", sizeof(float) * tokens_bv}, {"activations", c.model.activation_bytes_for(b, p, true)}}))
        continue;
      c.say(fmt::format("pp{} batch {}", p, b));
      const auto prompts = synthetic_prompts(c.model, b, p, c.o.seed);
      std::vector<int32_t> tokens;
      for (const auto& pr : prompts) tokens.insert(tokens.end(), pr.begin(), pr.end());
      std::vector<int> n_tokens(static_cast<size_t>(b), p);
      std::vector<float> logits(static_cast<size_t>(b) * static_cast<size_t>(p) * static_cast<size_t>(V));
      const auto secs = repeat(c.o.repetitions, [&] {
        Stopwatch sw;
        c.context.forward(tokens, b, p, n_tokens, Context::Logits::All, logits);
        return sw.seconds();
      });
      const double tok = static_cast<double>(b) * p;
      Row r = c.row("pp", fmt::format("pp{}", p));
      r.batch = b;
      r.n_prompt = p;
      r.unit = "tok/s";
      r.value = summarize(map_samples(secs, [&](double s) { return tok / s; }));
      const double flops = prompt_flops(c.hp, p, b);
      const double gflops = flops / median(secs) / 1e9;
      r.with("GFLOP_per_s", gflops);
      if (c.roofline) {  // compare with sgemm at the same M (when its matrices fit)
        if (const auto* g = c.sgemm_at(static_cast<int64_t>(b) * p))
          r.with("sgemm_GFLOP_per_s", g->gflops).with("frac_of_sgemm", gflops / g->gflops);
      }
      c.rep.rows.push_back(r);
      // The same prompts with logits at the last position only: what llama-bench's
      // pp measures (llama_batch_get_one leaves batch.logits null, so llama_decode
      // outputs only the last token), the prefill before generation.
      const auto secs_last = repeat(c.o.repetitions, [&] {
        Stopwatch sw;
        c.context.forward(tokens, b, p, n_tokens, Context::Logits::Last, logits);
        return sw.seconds();
      });
      Row rl = c.row("pp", fmt::format("pp{} last", p));
      rl.batch = b;
      rl.n_prompt = p;
      rl.unit = "tok/s";
      rl.value = summarize(map_samples(secs_last, [&](double s) { return tok / s; }));
      const double flops_last = flops - static_cast<double>(b) * (p - 1) * output_matmul_flops_per_token(c.hp);
      rl.with("GFLOP_per_s", flops_last / median(secs_last) / 1e9);
      c.rep.rows.push_back(rl);
    }
  }
  c.note("pp: logits at every position (scoring); 'ppP last': logits at the last position only, as llama-bench's "
         "pp (prefill). GFLOP/s counts 2*M*N*K per weight matrix (7 per layer and the output layer at every position) plus "
         "causal attention 2*2*(P^2/2)*n_embd per layer and row (QK^T and PV over the lower triangle; softmax, "
         "norms and RoPE not counted; the output layer only at the last position for 'last'); frac_of_sgemm divides by oneDNN sgemm at the same shapes and M = batch*P "
         "(weight matmuls only).");
}

// ---- ll -----------------------------------------------------------------------

void run_ll(Ctx& c) {
  drop_caches(c.context);
  if (c.hp.n_ctx_train < 2) {
    c.warn(fmt::format("ll skipped: a request needs at least 2 tokens (one scored) but the model's context length is {}",
                       c.hp.n_ctx_train));
    return;
  }
  std::mt19937_64 rng(c.o.seed + 17);
  const int lo = std::min(32, c.hp.n_ctx_train), hi = std::min(160, c.hp.n_ctx_train);
  std::uniform_int_distribution<int> len(lo, hi);
  std::vector<ScoreRequest> reqs;
  double tokens = 0, scored = 0;
  for (int i = 0; i < c.o.ll_requests; ++i) {
    const int n = len(rng);
    ScoreRequest r;
    r.tokens = synthetic_prompts(c.model, 1, n, c.o.seed + 1000 + static_cast<uint64_t>(i))[0];
    r.score_from = std::max(1, n - std::max(1, n / 4));  // context 3/4, continuation 1/4
    tokens += n;
    scored += n - r.score_from;
    reqs.push_back(std::move(r));
  }
  for (int b : c.o.batches) {
    // score() forwards rows of up to hi - 1 tokens with logits at every position
    if (!c.fits(fmt::format("ll batch {}", b),
                {{"activations", c.model.activation_bytes_for(std::min(b, c.o.ll_requests), hi - 1, true)}}))
      continue;
    c.say(fmt::format("ll: {} requests, batch {}", reqs.size(), b));
    const auto secs = repeat(c.o.repetitions, [&] {
      Stopwatch sw;
      score(c.context, reqs, b);
      return sw.seconds();
    });
    Row r = c.row("ll", "score");
    r.batch = b;
    r.unit = "req/s";
    r.value = summarize(map_samples(secs, [&](double s) { return reqs.size() / s; }));
    r.with("tok_s", tokens / median(secs)).with("scored_tok_s", scored / median(secs)).with("requests", static_cast<double>(reqs.size()));
    c.rep.rows.push_back(r);
  }
  c.note(fmt::format("ll: {} synthetic requests of {}..{} tokens (last quarter scored), kveval::score in batches; "
                     "tok_s counts every token forwarded.",
                     c.o.ll_requests, lo, hi));
}

/// The 1-, 5- and 15-minute load averages (/proc/loadavg); empty if unreadable.
std::vector<double> load_average() {
  std::vector<double> v(3, 0.0);
  std::FILE* f = std::fopen("/proc/loadavg", "r");
  if (!f) return {};
  const int n = std::fscanf(f, "%lf %lf %lf", &v[0], &v[1], &v[2]);
  std::fclose(f);
  if (n != 3) return {};
  return v;
}

std::string iso_time_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

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
                         Bound{o.gen_mixed_rows, "--gen-mixed-rows", 4096}})
    if (b.v < 1 || b.v > b.hi) throw ArgumentError(fmt::format("{}: must be in [1, {}], got {}", b.name, b.hi, b.v));
  if (o.kv_cache_dtypes.empty()) throw ArgumentError("--kv-cache-dtype: expected at least one value");
  for (const auto& k : o.kv_cache_dtypes) parse_kv_cache_dtype(k, "--kv-cache-dtype");  // a bad name fails first
  if (o.kv_cache_dtypes.size() > 1 && std::find(o.tests.begin(), o.tests.end(), "fidelity") != o.tests.end())
    throw ArgumentError(fmt::format("--kv-cache-dtype {}: --tests fidelity takes one KV-cache type (it compares compute "
                                    "dtypes); run it on its own",
                                    fmt::join(o.kv_cache_dtypes, ",")));
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
    throw MeasurementError(fmt::format("{} stopped after {} of {} tokens in row {}: {}{}", what, g.ids.size(),
                                       expected[r], r, why,
                                       g.kv_f16_overflows > 0 ? " (" + kv_f16_overflow_note(g.kv_f16_overflows) + ")"
                                                              : std::string()));
  }
}

namespace {

/// The start of the report's meta: versions, time, machine and the options as given.
void write_start_meta(const Options& o, Report& rep) {
  rep.meta["kveval_version"] = version();
  rep.meta["git_hash"] = git_hash();
  rep.meta["timestamp"] = iso_time_utc();
  rep.meta["machine"] = {{"threads", std::thread::hardware_concurrency()},
                         {"llc_bytes", backend::last_level_cache_bytes()},
                         {"stream_buffer_bytes", o.stream_bytes ? o.stream_bytes : backend::stream_buffer_bytes()},
                         {"loadavg_start", load_average()}};
  nlohmann::json opts = {{"threads", o.threads},         {"batch_sizes", o.batches},
                         {"n_prompt", o.n_prompt},       {"n_gen", o.n_gen},
                         {"tg_prompt", o.tg_prompt},     {"repetitions", o.repetitions},
                         {"tests", o.tests.empty() ? default_tests() : o.tests},
                         {"switch_rounds", o.switch_rounds}, {"switch_batch", o.switch_batch},
                         {"switch_prompt", o.switch_prompt}, {"switch_gen", o.switch_gen},
                         {"ll_requests", o.ll_requests}, {"seed", o.seed},
                         {"gen_mixed_prompts", o.gen_mixed_prompts}, {"gen_mixed_max_gen", o.gen_mixed_max_gen},
                         {"gen_mixed_rows", o.gen_mixed_rows}, {"dtypes", o.dtypes},
                         {"kv_cache_dtypes", o.kv_cache_dtypes}};
  opts["cache_shapes"] = nlohmann::json::array();
  for (const auto& s : o.cache_shapes) opts["cache_shapes"].push_back({s[0], s[1]});
  rep.meta["options"] = opts;
}

/// The compute dtypes of a bench, resolved against the file before anything loads.
struct Sweep {
  std::vector<ComputeDtype> dtypes;  ///< as given (--dtype), auto included
  std::vector<std::string> wanted;   ///< what each resolves to for this file: a repeat is never loaded
  bool one_load = false;             ///< one distinct dtype at one thread count: its memory error is the whole story
  /// With several compute dtypes, tg runs after their other tests with every
  /// load kept resident, all dtypes and KV-cache types interleaved (run_tg).
  bool tg_together = false;
};

Sweep make_sweep(const Options& o) {
  Sweep w;
  for (const auto& d : o.dtypes) w.dtypes.push_back(parse_compute_dtype(d, "--dtype"));
  if (w.dtypes.empty()) w.dtypes.push_back(ComputeDtype::Auto);
  for (ComputeDtype dt : w.dtypes) w.wanted.push_back(to_string(resolve_dtype_for_file(o.model_path, dt)));
  w.one_load = std::set<std::string>(w.wanted.begin(), w.wanted.end()).size() == 1 && o.threads.size() == 1;
  w.tg_together = selected(o, "tg") && w.dtypes.size() > 1;
  return w;
}

/// The state of one thread count's sweep over the compute dtypes.
struct ThreadSweep {
  const Options& o;
  const Sweep& w;
  int t;
  Report& rep;
  const std::function<void(const std::string&)>& progress;
  const std::function<void(const std::string&)>& info;
  std::vector<std::string> measured, given;  // resolved dtypes at this thread count, and the name each was given as
  std::vector<std::string> skipped;          // resolved dtypes whose load did not fit here (warned once)
  std::vector<Kept> kept;                    // tg_together: the loads whose tg is still to run

  /// True (with a warning) when `resolved` was measured already at this thread count.
  bool once_only(const std::string& resolved, ComputeDtype dt) {
    const auto seen = std::find(measured.begin(), measured.end(), resolved);
    if (seen == measured.end()) return false;
    rep.add_warning(fmt::format("--dtype {} and {} both resolve to {} for this model: measured once",
                                given[static_cast<size_t>(seen - measured.begin())], to_string(dt), resolved));
    return true;
  }

  /// Loads `want` at this thread count. A load that does not fit skips its dtype at this
  /// thread count with a warning when other loads are planned (the rows measured stay);
  /// with one load planned, the memory error is the whole story. nullptr when skipped.
  std::unique_ptr<Model> load(const ModelOptions& mo, const std::string& want) {
    try {
      return Model::load(o.model_path, mo);
    } catch (const MemoryError& e) {
      if (kept.empty()) {
        if (w.one_load) throw;
        rep.add_warning(fmt::format("--dtype {} with -t {} skipped: loading it does not fit ({})", want, t, e.what()));
        skipped.push_back(want);
        return nullptr;
      }
      // The loads kept for tg leave no room for this one: their tg runs now (interleaved among
      // them) and they are released; this load and those after it form the next group.
      std::vector<std::string> names;
      for (const Kept& k : kept) names.push_back(to_string(k.model->dtype()));
      const std::string apart =
          fmt::format("tg with -t {}: --dtype {} not interleaved as one group: loading {} beside the weights of {} "
                      "does not fit ({}); the tg of {} ran first, apart from {}",
                      t, fmt::join(o.dtypes, ","), want, fmt::join(names, ", "), e.what(), fmt::join(names, ", "),
                      want);
      run_kept_tg(kept);
      std::unique_ptr<Model> model;
      try {
        model = Model::load(o.model_path, mo);
      } catch (const MemoryError& e2) {  // not even alone: this dtype is not measured at this thread count
        rep.add_warning(fmt::format("--dtype {} with -t {} skipped: loading it does not fit beside the weights of {}, "
                                    "nor after their release ({}); the tg of {} ran without it",
                                    want, t, fmt::join(names, ", "), e2.what(), fmt::join(names, ", ")));
        skipped.push_back(want);
        return nullptr;
      }
      rep.add_warning(apart);
      return model;
    }
  }

  /// The KV-cache types of this load, resolved against its compute dtype (auto may repeat a listed one).
  std::vector<KvCacheDtype> kv_types_of(const Model& model, const std::string& dname) {
    std::vector<KvCacheDtype> kv_types;
    std::vector<std::string> kv_given;  // the name each was given as
    for (const auto& k : o.kv_cache_dtypes) {
      const KvCacheDtype kv = resolve_kv_cache_dtype(parse_kv_cache_dtype(k, "--kv-cache-dtype"), model.dtype());
      const auto seen = std::find(kv_types.begin(), kv_types.end(), kv);
      if (seen != kv_types.end()) {
        rep.add_warning(fmt::format("--kv-cache-dtype {} and {} both resolve to {} with --dtype {}: measured once",
                                    kv_given[static_cast<size_t>(seen - kv_types.begin())], k, to_string(kv), dname));
        continue;
      }
      kv_types.push_back(kv);
      kv_given.push_back(k);
    }
    return kv_types;
  }

  void record_load(const Model& model, const std::vector<KvCacheDtype>& kv_types);
  void run_tests(Ctx& c, Model& model, const std::vector<KvCacheDtype>& kv_types);
  void run();
};

/// The load line and the report's meta for this load: one entry per compute dtype
/// (weight dtype and resident bytes differ), the model's once.
void ThreadSweep::record_load(const Model& model, const std::vector<KvCacheDtype>& kv_types) {
  const HParams& hp = model.hparams();
  const LoadSummary& ls = model.load_summary();
  const std::string dname = to_string(model.dtype());
  if (!rep.meta.contains("dtypes") || !rep.meta["dtypes"].contains(dname)) {
    if (info) {
      info(format_load_summary(ls));
      std::vector<std::string> kv_names;
      for (KvCacheDtype kv : kv_types) kv_names.push_back(to_string(kv));
      info(fmt::format("compute dtype {}; KV cache {}", model.dtype_note(),  // as run and generate: says what was widened
                       fmt::join(kv_names, ", ")));
    }
    rep.meta["dtype_order"].push_back(dname);  // the header lists the dtypes in this order
    rep.meta["dtypes"][dname] = {{"weight_dtype", ls.weight_dtype},
                                 {"resident_weight_bytes", ls.resident_bytes},
                                 {"weight_bytes", model.weight_bytes()},
                                 {"streamed_weight_bytes", streamed_weight_bytes(hp, static_cast<double>(ls.resident_bytes))},
                                 {"kv_cache_dtype", to_string(model.kv_cache_dtype())},
                                 {"note", model.dtype_note()}};
  }
  if (kv_types.size() > 1) {
    auto& names = rep.meta["dtypes"][dname]["kv_cache_dtypes"] = nlohmann::json::array();
    for (KvCacheDtype kv : kv_types) names.push_back(to_string(kv));
  }
  if (rep.meta.contains("model")) return;
  nlohmann::json types = nlohmann::json::object();
  for (const auto& [name, n] : ls.tensor_types) types[name] = n;
  rep.meta["model"] = {{"path", o.model_path},
                       {"n_params", n_params(hp)},
                       {"weight_bytes", model.weight_bytes()},
                       {"weight_dtype", ls.weight_dtype},
                       {"streamed_weight_bytes", streamed_weight_bytes(hp, static_cast<double>(ls.resident_bytes))},
                       {"n_vocab", hp.n_vocab},
                       {"n_embd", hp.n_embd},
                       {"n_layer", hp.n_layer},
                       {"n_head", hp.n_head},
                       {"n_head_kv", hp.n_head_kv},
                       {"n_ff", hp.n_ff},
                       {"n_ctx_train", hp.n_ctx_train},
                       {"tied_output", hp.tied_output},
                       {"tensor_types", types},
                       {"weight_dtype", ls.weight_dtype},
                       {"resident_weight_bytes", ls.resident_bytes},
                       {"load_seconds", ls.load_seconds}};
}

/// The selected tests of one load. The tests without a KV cache run once per load, with
/// the first type; tg runs then too, for all types at once (interleaved); the others once per type.
void ThreadSweep::run_tests(Ctx& c, Model& model, const std::vector<KvCacheDtype>& kv_types) {
  const std::string dname = to_string(model.dtype());
  for (size_t ki = 0; ki < kv_types.size(); ++ki) {
    const bool first = ki == 0;
    if (!first && !selected(o, "cache") && !selected(o, "switch") && !selected(o, "gen-mixed")) break;
    drop_caches(c.context);
    c.context.set_kv_cache_dtype(kv_types[ki]);
    if (kv_types.size() > 1) c.say(fmt::format("KV cache {}", to_string(kv_types[ki])));
    if (first && selected(o, "roofline")) run_roofline(c);
    if (first && selected(o, "pp")) run_pp(c);
    if (first && selected(o, "tg") && !w.tg_together) run_tg(c, kv_types);
    c.context.set_kv_cache_dtype(kv_types[ki]);  // run_tg leaves the last
    // A test whose generation stops early (non-finite logits, e.g. an f16 cache
    // that overflowed) is skipped with a warning; the tests measured stay.
    auto guarded = [&](const char* test, const std::function<void()>& f) {
      try {
        f();
      } catch (const MeasurementError& e) {
        drop_caches(c.context);
        rep.add_warning(fmt::format("{} with --dtype {} and KV cache {} skipped: {}", test, dname,
                                    to_string(c.context.kv_cache_dtype()), e.what()));
      }
    };
    if (first && selected(o, "tg-nocache")) guarded("tg-nocache", [&] { run_tg_nocache(c); });
    if (selected(o, "cache")) run_cache(c);
    if (selected(o, "switch")) guarded("switch", [&] { run_switch(c); });
    if (first && selected(o, "ll")) run_ll(c);
    if (first && selected(o, "load")) run_load(o, c.threads, model.dtype(), rep, progress);
    // Dequantization does not depend on the compute dtype: once per thread count, with its first load.
    if (first && selected(o, "dequant") && measured.size() == 1) run_dequant(o, c.threads, rep, progress);
    if (selected(o, "gen-mixed")) guarded("gen-mixed", [&] { run_gen_mixed(o, c.context, c.threads, rep, progress); });
  }
}

/// Every compute dtype at this thread count: load, record, run its tests; tg of the kept loads last.
void ThreadSweep::run() {
  for (size_t di = 0; di < w.dtypes.size(); ++di) {
    const ComputeDtype dt = w.dtypes[di];
    const std::string& want = w.wanted[di];  // the resolved name, for warnings
    // A repeat (auto included, resolved above) or a dtype already skipped here is not loaded again
    if (once_only(want, dt) || std::find(skipped.begin(), skipped.end(), want) != skipped.end()) continue;
    ModelOptions mo;
    mo.hash = false;
    mo.threads = t;
    mo.dtype = dt;
    mo.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtypes.front(), "--kv-cache-dtype");
    std::unique_ptr<Model> model = load(mo, want);
    if (!model) continue;
    if (progress) progress(fmt::format("[t={}] dtype {}", t, model->dtype_note()));
    const std::string dname = to_string(model->dtype());
    measured.push_back(dname);
    given.push_back(to_string(dt));
    std::vector<KvCacheDtype> kv_types = kv_types_of(*model, dname);
    record_load(*model, kv_types);
    auto ctx = std::unique_ptr<Ctx>(
        new Ctx{o, *model, model->hparams(), model->threads(), rep, progress, {}, {}, {}, false, {}});
    run_tests(*ctx, *model, kv_types);
    if (w.tg_together) {
      drop_caches(ctx->context);
      kept.push_back({std::move(model), std::move(ctx), std::move(kv_types), mo});
    }
  }
  run_kept_tg(kept);
}

}  // namespace

Report run_bench(const Options& o, const std::function<void(const std::string&)>& progress,
                 const std::function<void(const std::string&)>& info) {
  validate(o);
  std::optional<eval::EvalSpec> fidelity_spec;  // read before any test runs
  if (selected(o, "fidelity")) fidelity_spec = load_fidelity_spec(o);
  Report rep;
  write_start_meta(o, rep);
  // What each dtype resolves to for this file (auto included) before anything loads: a repeat is
  // never loaded, warnings name the resolved dtype, and one load planned is known.
  const Sweep w = make_sweep(o);
  for (int t : o.threads) {
    ThreadSweep ts{o, w, t, rep, progress, info, {}, {}, {}, {}};
    ts.run();
  }
  if (fidelity_spec) run_fidelity(o, std::move(*fidelity_spec), o.threads.front(), rep, progress);
  rep.meta["machine"]["loadavg_end"] = load_average();
  return rep;
}

}  // namespace kveval::bench
