// The plan of `kveval bench`: see plan.hpp.
#include "bench/plan.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "bench/gen.hpp"
#include "model/gguf.hpp"
#include "util/error.hpp"

namespace kveval::bench {

namespace detail {

KvTypes kv_types_for(const Options& o, ComputeDtype compute) {
  KvTypes out;
  std::vector<std::string> given;  // the name each was given as
  for (const auto& k : o.kv_cache_dtypes) {
    const KvCacheDtype kv = resolve_kv_cache_dtype(parse_kv_cache_dtype(k, "--kv-cache-dtype"), compute);
    const auto seen = std::find(out.types.begin(), out.types.end(), kv);
    if (seen != out.types.end()) {
      out.warnings.push_back(fmt::format("--kv-cache-dtype {} and {} both resolve to {} with --dtype {}: measured once",
                                         given[static_cast<size_t>(seen - out.types.begin())], k, to_string(kv),
                                         to_string(compute)));
      continue;
    }
    out.types.push_back(kv);
    given.push_back(k);
  }
  return out;
}

}  // namespace detail

ModelFacts model_facts(const Options& o) {
  ModelFacts f;
  std::vector<ComputeDtype> given;  // every name parsed before the file is read
  for (const auto& d : o.dtypes) given.push_back(parse_compute_dtype(d, "--dtype"));
  if (given.empty()) given.push_back(ComputeDtype::Auto);
  for (ComputeDtype d : given) f.dtypes.push_back(to_string(resolve_dtype_for_file(o.model_path, d)));
  const gguf::File file(o.model_path);
  try {  // a key of the wrong type is Model::load's error to report, in its words
    const std::string arch = file.get_string_or("general.architecture", "llama");
    f.n_ctx = static_cast<int>(std::min<uint64_t>(file.get_uint_or(arch + ".context_length", 0), 1 << 24));
  } catch (const FormatError&) {
    f.n_ctx = 0;
  }
  return f;
}

std::string to_string(const Instance& s) {
  switch (s.kind) {
    case Instance::Kind::Load:
      return fmt::format("load t={} {}", s.threads, s.dtype);
    case Instance::Kind::Warning:
      return fmt::format("warning {} t={} {}: {}", s.test, s.threads, s.dtype, s.warning);
    case Instance::Kind::Test:
      break;
  }
  std::string line = fmt::format("test {} t={} {}/{}", s.test, s.threads, s.dtype, s.kv_cache_dtype);
  if (s.batch) line += fmt::format(" b={}", s.batch);
  if (s.n_prompt) line += fmt::format(" p={}", s.n_prompt);
  if (s.n_gen) line += fmt::format(" g={}", s.n_gen);
  if (s.positions) line += fmt::format(" pos={}", s.positions);
  return line;
}

namespace {

using detail::selected;

/// Appends the steps of one load's tests; the fields every step shares come from `base`.
struct Planner {
  const Options& o;
  int n_ctx;
  std::vector<Instance>& out;

  void test(const Instance& base, const std::string& name, int b = 0, int p = 0, int g = 0, int pos = 0) {
    Instance s = base;
    s.kind = Instance::Kind::Test;
    s.test = name;
    s.batch = b;
    s.n_prompt = p;
    s.n_gen = g;
    s.positions = pos;
    out.push_back(s);
  }
  void warn(const Instance& base, const std::string& name, std::string text) {
    Instance s = base;
    s.kind = Instance::Kind::Warning;
    s.test = name;
    s.warning = std::move(text);
    out.push_back(s);
  }

  /// Generation lengths (-n) of `test` that fit after `p` prompt tokens: capped at
  /// n_ctx - p, skipped below 2 tokens, each cap or skip a warning; repeats once.
  std::vector<int> fitting_gens(const Instance& base, const char* name, int p) {
    std::vector<int> gens;
    for (int g : o.n_gen) {
      int gg = g;
      if (p + g > n_ctx) {
        gg = n_ctx - p;
        if (gg >= 2)
          warn(base, name,
               fmt::format("{}: -n {} after a {}-token prompt exceeds the context length {}; capped to {}", name, g, p,
                           n_ctx, gg));
        else
          warn(base, name,
               fmt::format("{}: -n {} after a {}-token prompt (--tg-prompt) leaves fewer than 2 of the context's {} "
                           "positions; skipped",
                           name, g, p, n_ctx));
      } else if (g < 2) {
        warn(base, name,
             fmt::format("{}: -n {} skipped: tg times the decode steps after the prefill's token, so n_gen must be >= 2",
                         name, g));
      }
      if (gg >= 2 && std::find(gens.begin(), gens.end(), gg) == gens.end()) gens.push_back(gg);
    }
    return gens;
  }

  void pp(const Instance& base) {
    for (int b : o.batches)
      for (int p : o.n_prompt) {
        if (p > n_ctx)
          warn(base, "pp", fmt::format("pp{} skipped: longer than the context length {}", p, n_ctx));
        else
          test(base, "pp", b, p);
      }
  }

  /// tg at every shape, each shape once per variant (interleaved when several).
  void tg(const std::vector<Instance>& variants) {
    for (int b : o.batches)
      for (int p : o.tg_prompt)
        for (int g : fitting_gens(variants.front(), "tg", p))
          for (const Instance& v : variants) test(v, "tg", b, p, g);
  }

  void tg_nocache(const Instance& base) {
    for (int b : o.batches)
      for (int p : o.tg_prompt)
        for (int g : fitting_gens(base, "tg-nocache", p)) test(base, "tg-nocache", b, p, g);
  }

  void cache(const Instance& base) {
    std::vector<std::array<int, 2>> done;  // shapes after capping: 2x200 and 2x128 at context 128 measure once
    for (const auto& shape : o.cache_shapes) {
      const int b = shape[0];
      int pos = shape[1];
      if (pos > n_ctx) {
        warn(base, "cache", fmt::format("cache: {} positions capped at the model's context length {}", pos, n_ctx));
        pos = n_ctx;
      }
      if (std::find(done.begin(), done.end(), std::array<int, 2>{b, pos}) != done.end()) continue;
      done.push_back({b, pos});
      test(base, "cache", b, 0, 0, pos);
    }
  }

  void switch_(const Instance& base) {
    if (n_ctx < 2) {
      warn(base, "switch",
           fmt::format("switch skipped: a round needs 2 positions (a 1-token prompt and 1 generated token) but the "
                       "model's context length is {}",
                       n_ctx));
      return;
    }
    const int p = std::min(o.switch_prompt, n_ctx - 1);
    const int g = std::min(o.switch_gen, n_ctx - p);
    if (p != o.switch_prompt || g != o.switch_gen)
      warn(base, "switch",
           fmt::format("switch: --switch-prompt {} and --switch-gen {} capped to {} and {} (context length {})",
                       o.switch_prompt, o.switch_gen, p, g, n_ctx));
    test(base, "switch", o.switch_batch, p, g);
  }

  void ll(const Instance& base) {
    if (n_ctx < 2) {
      warn(base, "ll",
           fmt::format("ll skipped: a request needs at least 2 tokens (one scored) but the model's context length is {}",
                       n_ctx));
      return;
    }
    for (int b : o.batches) test(base, "ll", b);
  }

  void mc(const Instance& base) {
    const int64_t need = int64_t(o.mc.prefix) + o.mc.context + o.mc.choice_tokens;  // one request's tokens
    if (need > int64_t(n_ctx) + 1) {
      warn(base, "mc",
           fmt::format("mc skipped: a request of {} + {} + {} tokens (--mc-prefix, --mc-context, --mc-choice-tokens) "
                       "does not fit the model's context length {}",
                       o.mc.prefix, o.mc.context, o.mc.choice_tokens, n_ctx));
      return;
    }
    for (int b : o.batches) test(base, "mc", b);
  }

  void gen_mixed(const Instance& base) {
    if (n_ctx < 33) {  // the workload's prompts: up to 32 tokens, then >= 1 generated
      warn(base, "gen-mixed",
           fmt::format("gen-mixed skipped: its prompts of up to 32 tokens and at least 1 generated token need "
                       "a context length of at least 33, but the model's is {}",
                       n_ctx));
      return;
    }
    const GenMixedLengths w = gen_mixed_lengths(o.gen_mixed_prompts, o.gen_mixed_max_gen, o.seed, n_ctx);
    if (w.capped > 0)
      warn(base, "gen-mixed",
           fmt::format("gen-mixed: max_gen_toks of {} of {} prompts capped so that prompt + generation fits "
                       "the context length {} (--gen-mixed-max-gen {})",
                       w.capped, w.max_gen_toks.size(), n_ctx, o.gen_mixed_max_gen));
    std::vector<int> row_counts;
    for (int b : o.batches)
      if (b >= 2) row_counts.push_back(b);
    if (row_counts.empty()) row_counts.push_back(o.gen_mixed_rows);
    for (int rows : row_counts)
      test(base, "gen-mixed", std::min(rows, static_cast<int>(w.max_gen_toks.size())), 0,
           static_cast<int>(w.gen_tokens()), w.positions);
  }

  /// The tests of one load, in run order: those without a KV cache with the
  /// first type, tg with all (unless `tg_apart`), cache, switch and gen-mixed once per type.
  void load_tests(const Instance& load, const std::vector<KvCacheDtype>& kv, bool tg_here, bool dequant) {
    std::vector<Instance> tg_variants;
    for (KvCacheDtype k : kv) {
      tg_variants.push_back(load);
      tg_variants.back().kv_cache_dtype = to_string(k);
    }
    for (size_t ki = 0; ki < kv.size(); ++ki) {
      const bool first = ki == 0;
      if (!first && !selected(o, "cache") && !selected(o, "switch") && !selected(o, "gen-mixed")) break;
      const Instance& base = tg_variants[ki];
      if (first && selected(o, "roofline")) test(base, "roofline");
      if (first && selected(o, "pp")) pp(base);
      if (first && selected(o, "tg") && tg_here) tg(tg_variants);
      if (first && selected(o, "tg-nocache")) tg_nocache(base);
      if (selected(o, "cache")) cache(base);
      if (selected(o, "switch")) switch_(base);
      if (first && selected(o, "ll")) ll(base);
      if (first && selected(o, "mc")) mc(base);
      if (first && selected(o, "load")) test(base, "load");
      if (first && selected(o, "dequant") && dequant) test(base, "dequant");
      if (selected(o, "gen-mixed")) gen_mixed(base);
    }
  }
};

}  // namespace

std::vector<Instance> plan(const Options& o, const ModelFacts& f) {
  std::vector<Instance> out;
  Planner pl{o, f.n_ctx, out};
  // With several compute dtypes, tg runs after their other tests, every load's variants interleaved.
  const bool tg_together = selected(o, "tg") && f.dtypes.size() > 1;
  for (int t : o.threads) {
    std::vector<std::string> loaded, given;  // resolved dtypes at this thread count, and the name each was given as
    std::vector<Instance> tg_variants;
    for (size_t di = 0; di < f.dtypes.size(); ++di) {
      const std::string& want = f.dtypes[di];
      const std::string as_given =
          o.dtypes.empty() ? std::string("auto") : to_string(parse_compute_dtype(o.dtypes[di], "--dtype"));
      Instance load;
      load.kind = Instance::Kind::Load;
      load.threads = t;
      load.dtype = want;
      if (const auto seen = std::find(loaded.begin(), loaded.end(), want); seen != loaded.end()) {
        pl.warn(load, "--dtype",
                fmt::format("--dtype {} and {} both resolve to {} for this model: measured once",
                            given[static_cast<size_t>(seen - loaded.begin())], as_given, want));
        continue;
      }
      out.push_back(load);
      loaded.push_back(want);
      given.push_back(as_given);
      const detail::KvTypes kv = detail::kv_types_for(o, parse_compute_dtype(want, "--dtype"));
      for (const auto& w : kv.warnings) pl.warn(load, "--kv-cache-dtype", w);
      pl.load_tests(load, kv.types, !tg_together, loaded.size() == 1);
      for (KvCacheDtype k : kv.types) {
        tg_variants.push_back(load);
        tg_variants.back().kv_cache_dtype = to_string(k);
      }
    }
    if (tg_together) pl.tg(tg_variants);
  }
  if (selected(o, "fidelity")) {
    Instance fid;
    fid.threads = o.threads.front();
    pl.test(fid, "fidelity");
  }
  return out;
}

}  // namespace kveval::bench
