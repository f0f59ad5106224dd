// `kveval bench` tests of generation throughput: "tg" (cached decode, several
// KV-cache types or compute dtypes interleaved; with several dtypes, the kept
// loads of run_kept_tg) and "tg-nocache" (every step re-runs the whole
// sequence; its speedup row compares the two paths).
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "model/cost.hpp"
#include "bench/ctx.hpp"
#include "bench/stats.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"

namespace kveval::bench::detail {

namespace {

/// Timed passes of the stream read that tg takes before each repetition.
constexpr int kPairedPasses = 3;

/// The timings of one variant at one shape (the warm-up dropped by rows()).
struct TgTimes {
  std::vector<double> decode, prefill, e2e;
  bool failed = false;  ///< its generation stopped early: skipped with a warning
};

/// run_tg's state: the variants, their streamed bytes and labels.
struct TgRun {
  const std::vector<TgVariant>& variants;
  backend::StreamReader* reader;
  Ctx& c0;
  bool dtypes_differ = false;
  std::vector<double> wbytes;  // weights streamed per decode step, per variant

  TgRun(const std::vector<TgVariant>& v, backend::StreamReader* r) : variants(v), reader(r), c0(*v.front().c) {
    for (const TgVariant& x : variants) {
      dtypes_differ = dtypes_differ || &x.c->model != &c0.model;
      wbytes.push_back(streamed_weight_bytes(x.c->model.load_summary()));
    }
  }
  /// "KV cache f16", or "bf16 KV f16" when the variants span compute dtypes.
  std::string label(const TgVariant& v) const {
    return dtypes_differ ? fmt::format("{} KV {}", to_string(v.c->model.dtype()), to_string(v.kv))
                         : fmt::format("KV cache {}", to_string(v.kv));
  }
  static void use(const TgVariant& v) {
    if (v.c->context.kv_cache_dtype() == v.kv) return;
    drop_caches(v.c->context);
    v.c->context.set_kv_cache_dtype(v.kv);
  }

  /// The variants whose cache and activations fit at this shape (indices into variants).
  std::vector<size_t> fitting(int b, int p, int g) const {
    // No load keeps a cache of another shape (each load's cache is set up again in the warm-up).
    for (const TgVariant& v : variants) drop_caches(v.c->context);
    std::vector<size_t> group;
    for (size_t k = 0; k < variants.size(); ++k) {
      const TgVariant& v = variants[k];
      use(v);
      std::string named = variants.size() > 1 ? " with " + label(v) : std::string();
      if (variants.size() == 1 || !dtypes_differ) named += v.c->dtype_suffix();  // else label(v) names the dtype
      const MemoryPart parts[] = {{"KV cache", v.c->context.cache_bytes_for(b, p + g)},
                                  {"activations", v.c->model.activation_bytes_for(b, p, false)}};
      if (fits_budget(v.c->rep, fmt::format("tg{} after p{} batch {}{}", g, p, b, named), parts)) group.push_back(k);
    }
    return group;
  }

  /// One generation of variant `v` into `t` (a warning and `failed` when it stops early).
  void once(const TgVariant& v, const std::vector<std::vector<int32_t>>& prompts, int b, int p, int g,
            TgTimes& t) const {
    if (t.failed) return;
    use(v);
    GenerateTiming gt;
    try {
      bench_generate(v.c->context, prompts, g, true, &gt);
    } catch (const MeasurementError& e) {
      t.failed = true;
      drop_caches(v.c->context);
      c0.warn(fmt::format("tg{} after p{} batch {} with {} skipped: {}", g, p, b, label(v), e.what()));
      return;
    }
    t.decode.push_back(gt.decode_seconds);
    t.prefill.push_back(gt.prefill_seconds);
    t.e2e.push_back(gt.prefill_seconds + gt.decode_seconds);
  }

  /// The row of variant `k` from its timings (warm-up dropped) and the paired stream reads.
  void add_row(size_t k, int b, int p, int g, TgTimes& t, const std::vector<double>& paired, bool first_of_load) const {
    const TgVariant& v = variants[k];
    Ctx& c = *v.c;
    const double wb = wbytes[k];
    for (auto* x : {&t.decode, &t.prefill, &t.e2e}) x->erase(x->begin());
    if (first_of_load) c.cached_e2e[{b, p, g}] = t.e2e;  // tg-nocache's speedup compares with its load's first type
    const double steps = g - 1;  // the first token comes from the prefill's logits
    Row r = c.row("tg", fmt::format("tg{}", g));
    r.kv_cache_dtype = to_string(v.kv);
    r.batch = b;
    r.n_prompt = p;
    r.n_gen = g;
    r.unit = "tok/s";
    r.value = summarize(map_samples(t.decode, [&](double s) { return b * steps / s; }));
    r.with("weights_MB", wb / 1e6).with("weights_GB_per_s", wb * steps / median(t.decode) / 1e9);
    if (!paired.empty()) {  // each repetition against the stream read taken just before it
      std::vector<double> frac;
      for (size_t i = 0; i < paired.size(); ++i) frac.push_back(wb * steps / t.decode[i] / 1e9 / paired[i]);
      r.with("frac_of_stream", median(frac)).with("paired_stream_GB_per_s", median(paired));
    }
    r.with("prefill_tok_s", b * p / median(t.prefill)).with("e2e_tok_s", b * g / median(t.e2e));
    c.rep.rows.push_back(r);
  }

  /// The variants at one shape, interleaved.
  void measure(int b, int p, int g) const {
    const std::vector<size_t> group = fitting(b, p, g);
    if (group.empty()) return;
    std::vector<std::string> names;
    for (size_t k : group) names.push_back(dtypes_differ ? label(variants[k]) : to_string(variants[k].kv));
    c0.say(fmt::format("tg{} after p{} batch {}{}", g, p, b,
                       group.size() > 1 ? fmt::format(", {} {} interleaved", dtypes_differ ? "dtypes" : "KV cache",
                                                      fmt::join(names, ", "))
                                        : std::string()));
    const auto prompts = synthetic_prompts(c0.model, b, p, c0.o.seed);
    std::vector<TgTimes> times(group.size());
    for (size_t k = 0; k < group.size(); ++k) once(variants[group[k]], prompts, b, p, g, times[k]);  // warm-up
    std::vector<double> paired;  // stream read just before each repetition (GB/s, best of kPairedPasses)
    for (int rep = 0; rep < c0.o.repetitions; ++rep) {
      if (reader) paired.push_back(reader->measure(kPairedPasses).best_gb_per_s);
      for (size_t k = 0; k < group.size(); ++k) once(variants[group[k]], prompts, b, p, g, times[k]);
    }
    for (size_t k = 0; k < group.size(); ++k)
      if (!times[k].failed)
        add_row(group[k], b, p, g, times[k], paired, k == 0 || variants[group[k - 1]].c != variants[group[k]].c);
  }

  std::string note() const {
    return fmt::format(
        "tg: tok/s = batch*(n_gen-1) / decode time (the first token comes from the prefill; decode time includes argmax "
        "and log-prob of each token); weights_MB = bytes of weights streamed per decode step (matrices in the compute "
        "dtype or their blocks; token_embd only when a tied output multiplies it) / 1e6; weights_GB_per_s = weights_MB * steps / decode time / 1e3{}. "
        "e2e_tok_s = batch*n_gen / (prefill + decode).{}",
        reader ? fmt::format("; frac_of_stream is the median over repetitions of that repetition's weights GB/s "
                             "divided by a stream read over the roofline's buffer (best of {} passes after one "
                             "warm-up) taken just before it, so that the machine's drift between minutes cancels; "
                             "paired_stream_GB_per_s is the median of those stream reads",
                             kPairedPasses)
               : std::string(),
        variants.size() > 1 ? fmt::format(" With several {}, tg interleaves them: one warm-up of each, then each "
                                          "repetition runs every one once, in turn.",
                                          dtypes_differ ? "compute dtypes (models loaded together) or KV-cache types"
                                                        : "KV-cache types")
                            : "");
  }
};

/// The distinct (batch, n_prompt, n_gen) of the Test steps, in order.
std::vector<std::array<int, 3>> shapes_of(Steps steps) {
  std::vector<std::array<int, 3>> out;
  for (const Instance& s : steps) {
    const std::array<int, 3> shape{s.batch, s.n_prompt, s.n_gen};
    if (s.kind == Instance::Kind::Test && std::find(out.begin(), out.end(), shape) == out.end()) out.push_back(shape);
  }
  return out;
}

}  // namespace

void run_tg(const std::vector<TgVariant>& variants, backend::StreamReader* reader, Steps steps) {
  if (variants.empty()) return;
  const TgRun run(variants, reader);
  std::array<int, 3> last{0, 0, 0};  // the plan lists a shape once per variant, consecutively
  for (const Instance& s : steps) {
    if (s.kind == Instance::Kind::Warning) {
      run.c0.warn(s.warning);
      continue;
    }
    const std::array<int, 3> shape{s.batch, s.n_prompt, s.n_gen};
    if (shape == last) continue;
    last = shape;
    run.measure(s.batch, s.n_prompt, s.n_gen);
  }
  for (const TgVariant& v : variants) drop_caches(v.c->context);
  run.c0.note(run.note());
}

void run_tg(Ctx& c, const std::vector<KvCacheDtype>& kv_types, Steps steps) {
  std::vector<TgVariant> variants;
  for (KvCacheDtype kv : kv_types) variants.push_back({&c, kv});
  const auto reader = make_stream_reader(c);
  run_tg(variants, reader.get(), steps);
}

std::unique_ptr<backend::StreamReader> make_stream_reader(Ctx& c) {
  if (!c.stream) return nullptr;
  try {
    check_memory_plan("tg's stream read", std::vector<MemoryPart>{{"stream buffer", c.stream->buffer_bytes}},
                      memory_budget());
  } catch (const MemoryError& e) {
    c.warn(fmt::format("tg with -t {}: no frac_of_stream, since its stream read (over a buffer of the roofline's "
                       "size, just before each repetition) does not fit: {}",
                       c.threads, e.what()));
    return nullptr;
  }
  return std::make_unique<backend::StreamReader>(c.threads, c.stream->buffer_bytes);
}

void run_tg_nocache(Ctx& c, Steps steps) {
  drop_caches(c.context);
  for (const Instance& step : steps) {
    if (step.kind == Instance::Kind::Warning) {
      c.warn(step.warning);
      continue;
    }
    const int b = step.batch, p = step.n_prompt, g = step.n_gen;
    if (!c.fits(fmt::format("tg-nocache{} after p{} batch {}", g, p, b),
                {{"activations", c.model.activation_bytes_for(b, p + g, false)}}))
      continue;
    c.say(fmt::format("tg-nocache{} after p{} batch {}", g, p, b));
    const auto prompts = synthetic_prompts(c.model, b, p, c.o.seed);
    const auto secs = repeat(c.o.repetitions, [&] {
      GenerateTiming t;
      bench_generate(c.context, prompts, g, false, &t);
      return t.prefill_seconds + t.decode_seconds;
    });
    Row r = c.row("tg-nocache", fmt::format("tg{}", g));
    r.batch = b;
    r.n_prompt = p;
    r.n_gen = g;
    r.unit = "tok/s";
    r.value = summarize(map_samples(secs, [&](double s) { return b * g / s; }));
    c.rep.rows.push_back(r);

    auto it = c.cached_e2e.find({b, p, g});
    if (it == c.cached_e2e.end()) {  // tg not selected (or its run of this type stopped): time it here
      std::vector<double> e2e;
      try {
        repeat(c.o.repetitions, [&] {
          GenerateTiming t;
          bench_generate(c.context, prompts, g, true, &t);
          e2e.push_back(t.prefill_seconds + t.decode_seconds);
          return 0.0;
        });
      } catch (const MeasurementError& e) {  // the uncached row stays; only the comparison is missing
        drop_caches(c.context);
        c.warn(fmt::format("tg-nocache: the speedup of tg{} after p{} batch {} with KV cache {} skipped: {}", g, p, b,
                           to_string(c.context.kv_cache_dtype()), e.what()));
        continue;
      }
      e2e.erase(e2e.begin());
      drop_caches(c.context);
      it = c.cached_e2e.emplace(std::array<int, 3>{b, p, g}, e2e).first;
    }
    const double t_cached = median(it->second), t_uncached = median(secs);
    const double ideal = generate_matmul_flops(c.hp, p, g, false) / generate_matmul_flops(c.hp, p, g, true);
    Row s = c.row("speedup", fmt::format("tg{}", g));
    s.batch = b;
    s.n_prompt = p;
    s.n_gen = g;
    s.unit = "x";
    s.value = exact(t_uncached / t_cached);
    s.with("cached_tok_s", b * g / t_cached)
        .with("uncached_tok_s", b * g / t_uncached)
        .with("ideal_ratio", ideal)
        .with("frac_of_ideal", t_uncached / t_cached / ideal);
    c.rep.rows.push_back(s);
  }
  c.note("tg-nocache: tok/s = batch*n_gen / (prefill + decode) where every step re-runs the whole sequence; speedup = "
         "uncached / cached end-to-end time (medians); ideal_ratio = ratio of the two paths' weight-matmul FLOPs "
         "(cached: layers*(P+G-1) + output*G; uncached: layers*(G*P + G(G-1)/2) + output*G; attention not counted).");
}

/// Why the kept loads' tg cannot run together: the first tg shape (batch,
/// prompt, generation: the Test steps in plan order) whose KV caches (each load's
/// largest type) and activations, all at once beside the loads and the stream
/// buffer, exceed the memory budget, as check_memory_plan words it; empty when
/// every shape fits.
static std::string tg_misfit(std::vector<Kept>& kept, Steps steps) {
  for (const auto& [b, p, gg] : shapes_of(steps)) {
    std::vector<MemoryPart> parts;
    for (Kept& k : kept) {
      uint64_t kv = 0;
      for (KvCacheDtype t : k.kv_types) {
        drop_caches(k.ctx->context);
        k.ctx->context.set_kv_cache_dtype(t);
        kv = std::max<uint64_t>(kv, k.ctx->context.cache_bytes_for(b, p + gg));
      }
      const std::string d = to_string(k.model->dtype());
      parts.push_back({fmt::format("KV cache ({})", d), kv});
      parts.push_back({fmt::format("activations ({})", d), k.model->activation_bytes_for(b, p, false)});
    }
    for (const Kept& k : kept)  // tg's paired stream read (make_stream_reader), when the roofline ran
      if (k.ctx->stream) {
        parts.push_back({"stream buffer", k.ctx->stream->buffer_bytes});
        break;
      }
    try {
      check_memory_plan(fmt::format("tg{} after p{} batch {} with every dtype's cache at once", gg, p, b), parts,
                        memory_budget());
    } catch (const MemoryError& e) {
      return e.what();
    }
  }
  return {};
}

void run_kept_tg(std::vector<Kept>& kept, Steps steps) {
  if (kept.empty()) return;
  if (kept.size() > 1) {
    if (const std::string misfit = tg_misfit(kept, steps); !misfit.empty()) {
      // Release every load, then load each again on its own for its tg.
      Ctx& c0 = *kept.front().ctx;
      std::vector<std::string> names;
      for (const Kept& k : kept) names.push_back(to_string(k.model->dtype()));
      c0.warn(fmt::format("tg with -t {}: --dtype {} measured one dtype at a time, not interleaved: {}", c0.threads,
                          fmt::join(names, ","), misfit));
      struct Again {
        ModelOptions options;
        std::vector<KvCacheDtype> kv_types;
        std::optional<backend::StreamResult> stream;
        std::string name;  // the resolved compute dtype
      };
      std::vector<Again> again;
      for (const Kept& k : kept) again.push_back({k.options, k.kv_types, k.ctx->stream, to_string(k.model->dtype())});
      const Options& o = c0.o;
      Report& rep = c0.rep;
      const auto& progress = c0.progress;
      const int threads = c0.threads;
      kept.clear();
      for (const Again& a : again) {
        std::unique_ptr<Model> model;
        try {
          model = Model::load(o.model_path, a.options);
        } catch (const MemoryError& e) {  // what the others left resident: this dtype's tg is lost, not the report
          rep.add_warning(fmt::format("tg with -t {}: --dtype {} skipped: loading it again on its own does not fit ({})",
                                      threads, a.name, e.what()));
          continue;
        }
        Ctx c{o, *model, model->hparams(), model->threads(), rep, progress, a.stream, {}, {}, false, {}};
        run_tg(c, a.kv_types, steps);
      }
      return;
    }
  }
  std::vector<TgVariant> variants;
  for (Kept& k : kept)
    for (KvCacheDtype kv : k.kv_types) variants.push_back({k.ctx.get(), kv});
  std::unique_ptr<backend::StreamReader> reader;
  for (Kept& k : kept)
    if (!reader) reader = make_stream_reader(*k.ctx);
  run_tg(variants, reader.get(), steps);
  kept.clear();
}

}  // namespace kveval::bench::detail
