#pragma once
// Internal to `kveval bench` (run.cpp and the test files it calls):
// repetition helpers and the per-thread-count context of the tests.
#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "backend/roofline.hpp"
#include "model/cost.hpp"
#include "bench/plan.hpp"
#include "bench/report.hpp"
#include "bench/run.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"

namespace kveval::bench::detail {

/// A run of consecutive plan steps of one test (plan.hpp): its Test steps are
/// measured, its Warning steps added to the report, in turn.
using Steps = std::span<const Instance>;

/// One warm-up call of `f`, then `reps` timed calls; `f` returns its sample.
template <class F>
std::vector<double> repeat(int reps, F&& f) {
  f();
  std::vector<double> out;
  out.reserve(static_cast<size_t>(reps));
  for (int i = 0; i < reps; ++i) out.push_back(f());
  return out;
}

inline std::vector<double> map_samples(const std::vector<double>& x, const std::function<double(double)>& f) {
  std::vector<double> y;
  for (double v : x) y.push_back(f(v));
  return y;
}

inline double us(double seconds) { return seconds * 1e6; }

/// Per-thread-count state shared by the tests.
struct Ctx {
  const Options& o;
  Model& model;
  const HParams& hp;
  int threads;
  Report& rep;
  const std::function<void(const std::string&)>& progress;
  std::optional<backend::StreamResult> stream;
  std::map<int64_t, backend::SgemmResult> sgemm;  // by M (rows through the layer matrices)
  std::set<int64_t> sgemm_skipped;                 // M whose matrices did not fit the memory budget
  bool roofline = false;  ///< the roofline test ran at this dtype: pp compares with sgemm at its M
  /// e2e seconds (prefill + decode) of cached generation by (batch, prompt, gen).
  std::map<std::array<int, 3>, std::vector<double>> cached_e2e;
  /// The tests' context over `model` (its KV cache and KV-cache type).
  Context context{model};

  void say(const std::string& s) const {
    if (progress) progress(fmt::format("[t={}] {}", threads, s));
  }
  Row row(const std::string& test, const std::string& name) const {
    Row r;
    r.test = test;
    r.name = name;
    r.threads = threads;
    r.dtype = to_string(model.dtype());
    r.kv_cache_dtype = to_string(context.kv_cache_dtype());
    r.matmul = model.load_summary().matmul;  // "exact" where --matmul int8 did not apply
    return r;
  }
  void note(const std::string& n) { rep.add_note(n); }
  /// A note that a requested size was skipped or capped (Report::add_warning).
  void warn(const std::string& n) { rep.add_warning(n); }
  /// " with --dtype bf16" when --dtype lists several, so that a skip says whose test it was; else "".
  std::string dtype_suffix() const {
    return o.dtypes.size() > 1 ? fmt::format(" with --dtype {}", to_string(model.dtype())) : std::string();
  }
  /// fits_budget on this report (the resident weights are already counted by the budget);
  /// `what` gets dtype_suffix().
  bool fits(const std::string& what, const std::vector<MemoryPart>& parts, const std::string& hint = {},
            const std::optional<MemoryBudget>& budget = {}) {
    return fits_budget(rep, what + dtype_suffix(), parts, hint, budget);
  }
  /// sgemm rate at the model's shapes with M rows (measured once per M, also
  /// reported as a roofline row); nullptr when its matrices (sgemm_bytes) do not
  /// fit the memory budget (one "skipped" warning per M).
  const backend::SgemmResult* sgemm_at(int64_t m) {
    auto it = sgemm.find(m);
    if (it != sgemm.end()) return &it->second;
    if (sgemm_skipped.count(m)) return nullptr;
    const auto shapes = weight_gemm_shapes(hp, m, m);
    if (!fits(fmt::format("roofline sgemm m={}", m), {{"sgemm matrices", sgemm_bytes(shapes)}})) {
      sgemm_skipped.insert(m);
      return nullptr;
    }
    say(fmt::format("roofline: sgemm at the model's shapes, M = {}", m));
    backend::SgemmResult r = backend::sgemm_throughput(threads, shapes, std::max(3, o.repetitions));
    Row row = this->row("roofline", fmt::format("sgemm m={}", m));
    row.unit = "GFLOP/s";
    row.value = exact(r.gflops);
    row.with("gflop_per_pass", r.flops_per_pass / 1e9).with("ms_per_pass", r.seconds_per_pass * 1e3);
    rep.rows.push_back(row);
    return &sgemm.emplace(m, r).first->second;
  }
};

inline void drop_caches(Context& m) {
  if (m.caches_are_setup()) m.delete_caches();
}

/// One model and KV-cache type that tg measures.
struct TgVariant {
  Ctx* c;           ///< the load (its model, compute dtype and report)
  KvCacheDtype kv;  ///< set on c->context before each of its generations
};
/// Test "tg" at the shapes (batch, n_prompt, n_gen) of the Test steps in
/// `steps` (each shape once, in order; the Warning steps added in turn) over
/// `variants` (one or more: KV-cache types of one load, or of several loads of
/// other compute dtypes resident together), interleaved: one warm-up of each,
/// then each repetition runs every variant once, in turn, so that the
/// machine's drift falls on all alike (their ratios are measured in one run).
/// With `reader` (the roofline's stream buffer), each repetition is preceded by
/// a stream read and frac_of_stream is the median of the paired ratios. A
/// variant whose generation stops early is skipped with a warning (tg.cpp).
/// Each model's caches are dropped at the end.
void run_tg(const std::vector<TgVariant>& variants, backend::StreamReader* reader, Steps steps);
/// run_tg over the KV-cache types of one load, with a stream buffer when the
/// roofline ran (make_stream_reader; released after). The model's type is left at the last.
void run_tg(Ctx& c, const std::vector<KvCacheDtype>& kv_types, Steps steps);
/// tg's paired yardstick: a stream buffer of the size the roofline measured at
/// this load, allocated now (tg.cpp). nullptr when the roofline did not
/// run; also nullptr, with a warning that tg reports no frac_of_stream, when
/// the buffer does not fit the memory budget.
std::unique_ptr<backend::StreamReader> make_stream_reader(Ctx& c);
/// A load whose tg runs after the other dtypes' tests (execute with several compute dtypes).
struct Kept {
  std::unique_ptr<Model> model;
  std::unique_ptr<Ctx> ctx;  // refers to *model (its Context too)
  std::vector<KvCacheDtype> kv_types;
  ModelOptions options;      // to load it again (run_kept_tg's fallback)
};

/// tg (`steps`: the tg steps of this thread count) of all kept loads, their
/// compute dtypes and KV-cache types interleaved, with one stream buffer for
/// the paired yardstick when the roofline ran; then released (kept is left
/// empty). When some tg shape does not fit with every load's cache at once,
/// every load is released first and each is loaded again alone for its tg,
/// with a warning (tg.cpp).
void run_kept_tg(std::vector<Kept>& kept, Steps steps);
/// Test "tg-nocache": generation re-running the whole sequence every step, and
/// its speedup against the cached path (tg.cpp).
void run_tg_nocache(Ctx& c, Steps steps);
/// Test "cache": KV-cache set-up, reset and teardown cost per shape (batch, positions) (cache.cpp).
void run_cache(Ctx& c, Steps steps);
/// Test "switch": generate/score alternation under both cache policies (cache.cpp).
void run_switch(Ctx& c, Steps steps);
/// Test "roofline": stream read bandwidth and sgemm at M = 1 (pp.cpp).
void run_roofline(Ctx& c);
/// Test "pp": cache-free forward at each (batch, n_prompt), logits at every
/// position and at the last only (pp.cpp).
void run_pp(Ctx& c, Steps steps);
/// Test "ll": kveval::score throughput on synthetic requests at each batch (pp.cpp).
void run_ll(Ctx& c, Steps steps);
/// Test "mc": multiple-choice scoring (mc_requests) packed and unpacked at each batch (mc.cpp).
void run_mc(Ctx& c, Steps steps);

}  // namespace kveval::bench::detail
