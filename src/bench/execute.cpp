// Runs a bench plan (see plan.hpp): model loads, test steps and warnings in turn.
#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "backend/roofline.hpp"
#include "bench/ctx.hpp"
#include "bench/fidelity.hpp"
#include "bench/gen.hpp"
#include "bench/load.hpp"
#include "bench/plan.hpp"
#include "model/cost.hpp"
#include "util/error.hpp"
#include "util/hash.hpp"

namespace kveval::bench {

using namespace detail;  // Ctx, Steps, Kept and the tests (ctx.hpp)

namespace {

using Fn = std::function<void(const std::string&)>;

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
                         {"kv_cache_dtypes", o.kv_cache_dtypes}, {"matmul", o.matmul},
                         {"mmap", o.map_weights}};  // run_bench records the whole list
  opts["mc"] = {{"docs", o.mc.docs}, {"prefix", o.mc.prefix}, {"context", o.mc.context}, {"choices", o.mc.choices},
                {"choice_tokens", o.mc.choice_tokens}};
  opts["cache_shapes"] = nlohmann::json::array();
  for (const auto& s : o.cache_shapes) opts["cache_shapes"].push_back({s[0], s[1]});
  rep.meta["options"] = opts;
}

/// The steps of one -t value.
struct ThreadRun {
  const Options& o;
  const ModelFacts& f;
  int t;
  Report& rep;
  const Fn& progress;
  const Fn& info;
  bool tg_together;  ///< several --dtype values: tg runs over the kept loads after their other tests
  Steps tg_steps;    ///< tg_together: the tg steps of this thread count
  std::vector<std::string> measured;  ///< resolved dtypes loaded at this thread count
  std::vector<Kept> kept;             ///< the loads whose tg is still to run
  bool dequant_pending = false;       ///< dequant's load did not fit: it runs with the next load

  /// One distinct dtype at one thread count: its memory error is the whole story.
  bool one_load() const {
    return std::set<std::string>(f.dtypes.begin(), f.dtypes.end()).size() == 1 && o.threads.size() == 1;
  }
  /// The --dtype value that resolves to `want` first, as given.
  ComputeDtype given(const std::string& want) const {
    for (size_t i = 0; i < f.dtypes.size() && i < o.dtypes.size(); ++i)
      if (f.dtypes[i] == want) return parse_compute_dtype(o.dtypes[i], "--dtype");
    return ComputeDtype::Auto;
  }

  std::unique_ptr<Model> load(const ModelOptions& mo, const std::string& want);
  std::unique_ptr<Model> load_beside_kept(const ModelOptions& mo, const std::string& want, const MemoryError& e);
  void record_load(const Model& model, const std::vector<KvCacheDtype>& kv_types);
  void run_segment(const Instance& load, Steps steps);
  void run_tests(Ctx& c, Model& model, const std::vector<KvCacheDtype>& kv_types, Steps steps);
  void run_test(Ctx& c, Model& model, const std::vector<KvCacheDtype>& kv_types, Steps steps);
  void run(Steps steps);
};

/// Loads `want` at this thread count. A load that does not fit skips its dtype at this
/// thread count with a warning when other loads are planned (the rows measured stay);
/// with one load planned, the memory error is the whole story. nullptr when skipped.
std::unique_ptr<Model> ThreadRun::load(const ModelOptions& mo, const std::string& want) {
  try {
    return Model::load(o.model_path, mo);
  } catch (const MemoryError& e) {
    if (!kept.empty()) return load_beside_kept(mo, want, e);
    if (one_load()) throw;
    rep.add_warning(fmt::format("--dtype {} with -t {} skipped: loading it does not fit ({})", want, t, e.what()));
    return nullptr;
  }
}

/// The loads kept for tg leave no room for `want` (`e`): their tg runs now (interleaved among
/// them) and they are released; this load and those after it form the next group.
std::unique_ptr<Model> ThreadRun::load_beside_kept(const ModelOptions& mo, const std::string& want,
                                                   const MemoryError& e) {
  std::vector<std::string> names;
  for (const Kept& k : kept) names.push_back(to_string(k.model->dtype()));
  const std::string apart =
      fmt::format("tg with -t {}: --dtype {} not interleaved as one group: loading {} beside the weights of {} "
                  "does not fit ({}); the tg of {} ran first, apart from {}",
                  t, fmt::join(o.dtypes, ","), want, fmt::join(names, ", "), e.what(), fmt::join(names, ", "), want);
  run_kept_tg(kept, tg_steps);
  std::unique_ptr<Model> model;
  try {
    model = Model::load(o.model_path, mo);
  } catch (const MemoryError& e2) {  // not even alone: this dtype is not measured at this thread count
    rep.add_warning(fmt::format("--dtype {} with -t {} skipped: loading it does not fit beside the weights of {}, "
                                "nor after their release ({}); the tg of {} ran without it",
                                want, t, fmt::join(names, ", "), e2.what(), fmt::join(names, ", ")));
    return nullptr;
  }
  rep.add_warning(apart);
  return model;
}

/// The load line and the report's meta for this load: one entry per compute dtype
/// (weight dtype and resident bytes differ), the model's once.
void ThreadRun::record_load(const Model& model, const std::vector<KvCacheDtype>& kv_types) {
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
                                 {"mapped_weight_bytes", ls.mapped_bytes},
                                 {"weight_bytes", model.weight_bytes()},
                                 {"streamed_weight_bytes", streamed_weight_bytes(ls)},
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
                       {"streamed_weight_bytes", streamed_weight_bytes(ls)},
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

/// One test's run of steps (one KV-cache type, or all of them for tg). A test
/// whose generation stops early (non-finite logits, e.g. an f16 cache that
/// overflowed) is skipped with a warning; the tests measured stay.
void ThreadRun::run_test(Ctx& c, Model& model, const std::vector<KvCacheDtype>& kv_types, Steps steps) {
  const std::string& test = steps.front().test;
  auto guarded = [&](const std::function<void()>& fn) {
    try {
      fn();
    } catch (const MeasurementError& e) {
      drop_caches(c.context);
      rep.add_warning(fmt::format("{} with --dtype {} and KV cache {} skipped: {}", test, to_string(model.dtype()),
                                  to_string(c.context.kv_cache_dtype()), e.what()));
    }
  };
  if (test == "roofline") run_roofline(c);
  if (test == "pp") run_pp(c, steps);
  if (test == "tg") {
    const KvCacheDtype kv = c.context.kv_cache_dtype();
    run_tg(c, kv_types, steps);
    c.context.set_kv_cache_dtype(kv);  // run_tg leaves the last
  }
  if (test == "tg-nocache") guarded([&] { run_tg_nocache(c, steps); });
  if (test == "cache") run_cache(c, steps);
  if (test == "switch") guarded([&] { run_switch(c, steps); });
  if (test == "ll") run_ll(c, steps);
  if (test == "mc") run_mc(c, steps);
  if (test == "load") run_load(o, c.threads, model.dtype(), rep, progress);
  if (test == "dequant") run_dequant(o, c.threads, rep, progress);
  if (test == "gen-mixed") guarded([&] { run_gen_mixed(o, c.context, c.threads, rep, progress, steps); });
}

/// The steps of one load, grouped by test and KV-cache type. Each KV-cache type
/// starts with no cache; dequant that moved here from a load that did not fit
/// runs where this load's would have (after load, before gen-mixed).
void ThreadRun::run_tests(Ctx& c, Model& model, const std::vector<KvCacheDtype>& kv_types, Steps steps) {
  const std::string first = to_string(kv_types.front());
  auto use = [&](KvCacheDtype kv) {
    drop_caches(c.context);
    c.context.set_kv_cache_dtype(kv);
    if (kv_types.size() > 1) c.say(fmt::format("KV cache {}", to_string(kv)));
  };
  auto pending_dequant = [&] {
    if (!dequant_pending) return;
    dequant_pending = false;
    run_dequant(o, c.threads, rep, progress);
  };
  use(kv_types.front());
  std::string current = first;
  for (size_t i = 0; i < steps.size();) {
    const Instance& s = steps[i];
    if (s.test == "--kv-cache-dtype") {
      rep.add_warning(s.warning);
      ++i;
      continue;
    }
    // tg lists each shape once per KV-cache type (interleaved in one run); the other tests run per type.
    const bool tg = s.test == "tg";
    size_t j = i + 1;
    while (j < steps.size() && steps[j].test == s.test && (tg || steps[j].kv_cache_dtype == s.kv_cache_dtype)) ++j;
    if (s.test == "gen-mixed" || (!tg && s.kv_cache_dtype != first)) pending_dequant();
    if (!tg && s.kv_cache_dtype != current) {
      current = s.kv_cache_dtype;
      use(parse_kv_cache_dtype(current, "--kv-cache-dtype"));
    }
    run_test(c, model, kv_types, steps.subspan(i, j - i));
    i = j;
  }
  pending_dequant();
}

/// A Load step and the steps that use it.
void ThreadRun::run_segment(const Instance& step, Steps steps) {
  const std::string& want = step.dtype;  // the resolved name, for warnings
  ModelOptions mo;
  mo.hash = false;
  mo.threads = t;
  mo.dtype = given(want);
  mo.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtypes.front(), "--kv-cache-dtype");
  mo.matmul = parse_matmul_mode(o.matmul.front(), "--matmul");  // run_bench: one mode per execute
  mo.map_weights = o.map_weights;
  std::unique_ptr<Model> model = load(mo, want);
  if (!model) {
    for (const Instance& s : steps) dequant_pending = dequant_pending || s.test == "dequant";
    return;
  }
  if (progress) progress(fmt::format("[t={}] dtype {}", t, model->dtype_note()));
  measured.push_back(to_string(model->dtype()));
  std::vector<KvCacheDtype> kv_types = kv_types_for(o, model->dtype()).types;
  record_load(*model, kv_types);
  auto ctx = std::unique_ptr<Ctx>(
      new Ctx{o, *model, model->hparams(), model->threads(), rep, progress, {}, {}, {}, false, {}});
  run_tests(*ctx, *model, kv_types, steps);
  if (tg_together) {
    drop_caches(ctx->context);
    kept.push_back({std::move(model), std::move(ctx), std::move(kv_types), mo});
  }
}

/// Every load of this thread count (a repeated --dtype warns when its dtype was measured); tg of the kept loads last.
void ThreadRun::run(Steps steps) {
  for (size_t i = 0; i < steps.size();) {
    const Instance& s = steps[i];
    if (s.kind != Instance::Kind::Load) {  // a --dtype repeat
      if (std::find(measured.begin(), measured.end(), s.dtype) != measured.end()) rep.add_warning(s.warning);
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < steps.size() && steps[j].kind != Instance::Kind::Load && steps[j].test != "--dtype") ++j;
    run_segment(s, steps.subspan(i + 1, j - i - 1));
    i = j;
  }
  run_kept_tg(kept, tg_steps);
}

}  // namespace

Report execute(const Options& o, const ModelFacts& f, const std::vector<Instance>& steps,
               std::optional<eval::EvalSpec> fidelity_spec, const Fn& progress, const Fn& info) {
  const auto fid = std::find_if(steps.begin(), steps.end(), [](const Instance& s) { return s.test == "fidelity"; });
  if (fid != steps.end() && !fidelity_spec) fidelity_spec = load_fidelity_spec(o);
  Report rep;
  write_start_meta(o, rep);
  // With several compute dtypes, tg runs after their other tests with every load kept resident.
  const bool tg_together = selected(o, "tg") && f.dtypes.size() > 1;
  const Steps all(steps);
  for (size_t i = 0; i < all.size();) {
    if (all[i].test == "fidelity") {
      run_fidelity(o, std::move(*fidelity_spec), all[i].threads, rep, progress);
      ++i;
      continue;
    }
    const int t = all[i].threads;
    size_t j = i;
    while (j < all.size() && all[j].threads == t && all[j].test != "fidelity") ++j;
    const Steps block = all.subspan(i, j - i);
    size_t k = block.size();  // the tg steps at the end of the block when they run over the kept loads
    if (tg_together)
      for (size_t x = 0; x < block.size() && k == block.size(); ++x)
        if (block[x].test == "tg") k = x;
    ThreadRun run{o, f, t, rep, progress, info, tg_together, block.subspan(k), {}, {}, false};
    run.run(block.first(k));
    i = j;
  }
  rep.meta["machine"]["loadavg_end"] = load_average();
  return rep;
}

}  // namespace kveval::bench
