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

/// Generation lengths (-n) of `test` that fit after `p` prompt tokens: capped at
/// n_ctx - p, skipped below 2 tokens; each cap or skip is a warning (Report::add_warning).
std::vector<int> fitting_gens(Ctx& c, const char* test, int p) {
  std::vector<int> out;
  const int ctx = c.hp.n_ctx_train;
  for (int g : c.o.n_gen) {
    int gg = g;
    if (p + g > ctx) {
      gg = ctx - p;
      if (gg >= 2)
        c.warn(fmt::format("{}: -n {} after a {}-token prompt exceeds the context length {}; capped to {}", test, g, p,
                           ctx, gg));
      else
        c.warn(fmt::format("{}: -n {} after a {}-token prompt (--tg-prompt) leaves fewer than 2 of the context's {} "
                           "positions; skipped",
                           test, g, p, ctx));
    } else if (g < 2) {
      c.warn(fmt::format("{}: -n {} skipped: tg times the decode steps after the prefill's token, so n_gen must be >= 2",
                         test, g));
    }
    if (gg >= 2 && std::find(out.begin(), out.end(), gg) == out.end()) out.push_back(gg);
  }
  return out;
}

/// Timed passes of the stream read that tg takes before each repetition.
constexpr int kPairedPasses = 3;

}  // namespace

void run_tg(const std::vector<TgVariant>& variants, backend::StreamReader* reader) {
  if (variants.empty()) return;
  Ctx& c0 = *variants.front().c;
  const size_t nk = variants.size();
  bool dtypes_differ = false;
  for (const TgVariant& v : variants) dtypes_differ = dtypes_differ || &v.c->model != &c0.model;
  // "KV cache f16", or "bf16 KV f16" when the variants span compute dtypes.
  auto label = [&](const TgVariant& v) {
    return dtypes_differ ? fmt::format("{} KV {}", to_string(v.c->model.dtype()), to_string(v.kv))
                         : fmt::format("KV cache {}", to_string(v.kv));
  };
  auto use = [&](const TgVariant& v) {
    if (v.c->context.kv_cache_dtype() == v.kv) return;
    drop_caches(v.c->context);
    v.c->context.set_kv_cache_dtype(v.kv);
  };
  std::vector<double> wbytes;
  for (const TgVariant& v : variants)
    wbytes.push_back(streamed_weight_bytes(v.c->hp, static_cast<double>(v.c->model.load_summary().resident_bytes)));
  // The variants at one shape, interleaved.
  auto measure = [&](int b, int p, int g) {
    // No load keeps a cache of another shape (each load's cache is set up again
    // in the warm-up), then the variants whose cache and activations fit.
    for (const TgVariant& v : variants) drop_caches(v.c->context);
    std::vector<size_t> group;  // indices into variants
    for (size_t k = 0; k < nk; ++k) {
      const TgVariant& v = variants[k];
      use(v);
      std::string named = nk > 1 ? " with " + label(v) : std::string();
      if (nk == 1 || !dtypes_differ) named += v.c->dtype_suffix();  // else label(v) names the dtype
      const MemoryPart parts[] = {{"KV cache", v.c->context.cache_bytes_for(b, p + g)},
                                  {"activations", v.c->model.activation_bytes_for(b, p, false)}};
      if (fits_budget(v.c->rep, fmt::format("tg{} after p{} batch {}{}", g, p, b, named), parts))
        group.push_back(k);
    }
    if (group.empty()) return;
    std::vector<std::string> names;
    for (size_t k : group) names.push_back(dtypes_differ ? label(variants[k]) : to_string(variants[k].kv));
    c0.say(fmt::format("tg{} after p{} batch {}{}", g, p, b,
                       group.size() > 1 ? fmt::format(", {} {} interleaved", dtypes_differ ? "dtypes" : "KV cache",
                                                      fmt::join(names, ", "))
                                        : std::string()));
    const auto prompts = synthetic_prompts(c0.model, b, p, c0.o.seed);
    const size_t ng = group.size();
    std::vector<std::vector<double>> decode(ng), e2e(ng), prefill(ng);
    std::vector<bool> failed(ng, false);  // a variant whose generation stopped early: skipped with a warning
    auto once = [&](size_t k) {
      if (failed[k]) return;
      const TgVariant& v = variants[group[k]];
      use(v);
      GenerateTiming t;
      try {
        bench_generate(v.c->context, prompts, g, true, &t);
      } catch (const MeasurementError& e) {
        failed[k] = true;
        drop_caches(v.c->context);
        c0.warn(fmt::format("tg{} after p{} batch {} with {} skipped: {}", g, p, b, label(v), e.what()));
        return;
      }
      decode[k].push_back(t.decode_seconds);
      prefill[k].push_back(t.prefill_seconds);
      e2e[k].push_back(t.prefill_seconds + t.decode_seconds);
    };
    for (size_t k = 0; k < ng; ++k) once(k);  // warm-up, dropped below
    std::vector<double> paired;  // stream read just before each repetition (GB/s, best of kPairedPasses)
    for (int rep = 0; rep < c0.o.repetitions; ++rep) {
      if (reader) paired.push_back(reader->measure(kPairedPasses).best_gb_per_s);
      for (size_t k = 0; k < ng; ++k) once(k);
    }
    for (size_t k = 0; k < ng; ++k) {
      if (failed[k]) continue;
      const TgVariant& v = variants[group[k]];
      Ctx& c = *v.c;
      const double wb = wbytes[group[k]];
      decode[k].erase(decode[k].begin());
      prefill[k].erase(prefill[k].begin());
      e2e[k].erase(e2e[k].begin());
      // tg-nocache's speedup compares with its load's first type (if it ran)
      if (k == 0 || variants[group[k - 1]].c != v.c) c.cached_e2e[{b, p, g}] = e2e[k];
      const double steps = g - 1;  // the first token comes from the prefill's logits
      Row r = c.row("tg", fmt::format("tg{}", g));
      r.kv_cache_dtype = to_string(v.kv);
      r.batch = b;
      r.n_prompt = p;
      r.n_gen = g;
      r.unit = "tok/s";
      r.value = summarize(map_samples(decode[k], [&](double s) { return b * steps / s; }));
      const double gbps = wb * steps / median(decode[k]) / 1e9;
      r.with("weights_MB", wb / 1e6).with("weights_GB_per_s", gbps);
      if (!paired.empty()) {  // each repetition against the stream read taken just before it
        std::vector<double> frac;
        for (size_t i = 0; i < paired.size(); ++i) frac.push_back(wb * steps / decode[k][i] / 1e9 / paired[i]);
        r.with("frac_of_stream", median(frac)).with("paired_stream_GB_per_s", median(paired));
      }
      r.with("prefill_tok_s", b * p / median(prefill[k])).with("e2e_tok_s", b * g / median(e2e[k]));
      c.rep.rows.push_back(r);
    }
  };
  for (int b : c0.o.batches)
    for (int p : c0.o.tg_prompt)
      for (int g : fitting_gens(c0, "tg", p)) measure(b, p, g);
  for (const TgVariant& v : variants) drop_caches(v.c->context);
  c0.note(fmt::format(
      "tg: tok/s = batch*(n_gen-1) / decode time (the first token comes from the prefill; decode time includes argmax "
      "and log-prob of each token); weights_MB = bytes of weights streamed per decode step (matrices in the compute "
      "dtype, token_embd not streamed) / 1e6; weights_GB_per_s = weights_MB * steps / decode time / 1e3{}. "
      "e2e_tok_s = batch*n_gen / (prefill + decode).{}",
      reader ? fmt::format("; frac_of_stream is the median over repetitions of that repetition's weights GB/s "
                           "divided by a stream read over the roofline's buffer (best of {} passes after one "
                           "warm-up) taken just before it, so that the machine's drift between minutes cancels; "
                           "paired_stream_GB_per_s is the median of those stream reads",
                           kPairedPasses)
      : std::string(),
      nk > 1 ? fmt::format(" With several {}, tg interleaves them: one warm-up of each, then each repetition runs "
                           "every one once, in turn.",
                           dtypes_differ ? "compute dtypes (models loaded together) or KV-cache types"
                                         : "KV-cache types")
             : ""));
}

void run_tg(Ctx& c, const std::vector<KvCacheDtype>& kv_types) {
  std::vector<TgVariant> variants;
  for (KvCacheDtype kv : kv_types) variants.push_back({&c, kv});
  const auto reader = make_stream_reader(c);
  run_tg(variants, reader.get());
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

void run_tg_nocache(Ctx& c) {
  drop_caches(c.context);
  for (int b : c.o.batches) {
    for (int p : c.o.tg_prompt) {
      for (int g : fitting_gens(c, "tg-nocache", p)) {
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
    }
  }
  c.note("tg-nocache: tok/s = batch*n_gen / (prefill + decode) where every step re-runs the whole sequence; speedup = "
         "uncached / cached end-to-end time (medians); ideal_ratio = ratio of the two paths' weight-matmul FLOPs "
         "(cached: layers*(P+G-1) + output*G; uncached: layers*(G*P + G(G-1)/2) + output*G; attention not counted).");
}

/// Why the kept loads' tg cannot run together: the first tg shape (batch,
/// prompt, generation as fitting_gens caps them) whose KV caches (each load's
/// largest type) and activations, all at once beside the loads and the stream
/// buffer, exceed the memory budget, as check_memory_plan words it; empty when
/// every shape fits.
static std::string tg_misfit(std::vector<Kept>& kept) {
  const Ctx& c0 = *kept.front().ctx;
  for (int b : c0.o.batches)
    for (int p : c0.o.tg_prompt)
      for (int g : c0.o.n_gen) {
        const int gg = std::min(g, c0.hp.n_ctx_train - p);
        if (gg < 2) continue;
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

void run_kept_tg(std::vector<Kept>& kept) {
  if (kept.empty()) return;
  if (kept.size() > 1) {
    if (const std::string misfit = tg_misfit(kept); !misfit.empty()) {
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
        run_tg(c, a.kv_types);
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
  run_tg(variants, reader.get());
  kept.clear();
}

}  // namespace kveval::bench::detail
