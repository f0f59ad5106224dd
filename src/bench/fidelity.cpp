// `kveval bench --tests fidelity`: see fidelity.hpp.
#include "bench/fidelity.hpp"

#include <algorithm>
#include <fstream>

#include <fmt/format.h>

#include "eval/fidelity.hpp"
#include "eval/spec.hpp"
#include "model/model.hpp"
#include "util/error.hpp"
#include "util/number_format.hpp"

namespace kveval::bench {

eval::EvalSpec load_fidelity_spec(const Options& o) {
  if (o.spec.empty())
    throw ArgumentError("--tests fidelity: needs --spec SPEC.json (the tasks to score in f32 and a reduced dtype)");
  if (!std::ifstream(o.spec)) throw ArgumentError(fmt::format("--spec {}: not found or not readable", o.spec));
  eval::EvalSpec spec = eval::load_spec(o.spec, o.model_path);
  if (o.map_weights) spec.map_weights = true;  // --mmap
  size_t docs = 0;
  for (const auto& t : spec.tasks) docs += t.docs.size();
  if (docs == 0)
    throw ArgumentError(fmt::format("--spec {}: no document to compare (no task has a document)", o.spec));
  // the requests from the file's tokenizer alone: a spec none of whose requests can be scored is refused
  // before either model loads
  const eval::RequestPreview p = eval::preview_requests(spec);
  if (p.requests > 0 && p.failed == p.requests)
    throw ArgumentError(fmt::format("--spec {}: fidelity would compare nothing: every request fails before scoring ({}; "
                                    "first: {})",
                                    o.spec, count_of(p.requests, "request"), p.first_error));
  return spec;
}

void run_fidelity(const Options& o, eval::EvalSpec spec, int threads, Report& rep,
                  const std::function<void(const std::string&)>& say) {
  spec.threads = threads;
  spec.kv_cache_dtype = parse_kv_cache_dtype(o.kv_cache_dtypes.front(), "--kv-cache-dtype");  // the bench's, as --dtype
  // f32 against the first reduced dtype of --dtype (bf16 when none is named).
  ComputeDtype reduced = ComputeDtype::BF16;
  for (const auto& d : o.dtypes) {
    const ComputeDtype c = parse_compute_dtype(d, "--dtype");
    if (c != ComputeDtype::F32 && c != ComputeDtype::Auto) {
      reduced = c;
      break;
    }
  }
  // --matmul int8: exact against int8 in the first --dtype (auto when none is named).
  const bool int8 = std::find(o.matmul.begin(), o.matmul.end(), "int8") != o.matmul.end();  // run_bench's int8 pass
  const ComputeDtype first = parse_compute_dtype(o.dtypes.empty() ? "auto" : o.dtypes.front(), "--dtype");
  if (say)
    say(int8 ? fmt::format("[t={}] fidelity: {} with --matmul exact and int8 ({})", threads, o.spec, to_string(first))
             : fmt::format("[t={}] fidelity: {} in f32 and {}", threads, o.spec, to_string(reduced)));
  const eval::FidelityReport f =
      int8 ? eval::compare_matmul(spec, first) : eval::compare_dtypes(spec, ComputeDtype::F32, reduced);
  int64_t docs = 0;  // documents compared by some metric
  for (const auto& m : f.flips) docs = std::max(docs, m.compared);
  const std::string failed =
      f.failed_either == 0
          ? ""
          : fmt::format("{} of the {} failed ({} run: {}, {} run: {}; first: {})", f.failed_either,
                        count_of(f.requests, "request"), f.dtype_a, f.failed[0], f.dtype_b, f.failed[1], f.first_error);
  if (f.tokens.tokens == 0 && docs == 0)
    throw ArgumentError(fmt::format("--spec {}: fidelity compared no token and no document{}", o.spec,
                                    failed.empty() ? "" : ": " + failed));
  if (!failed.empty()) rep.add_warning(fmt::format("fidelity: {}; they are left out of the comparison", failed));
  auto row = [&](const std::string& name, const std::string& unit, double v) {
    Row r;
    r.test = "fidelity";
    r.name = int8 ? name + " int8" : name;  // "max abs dlogprob int8": exact against int8
    r.threads = threads;
    r.dtype = f.dtype_b;
    r.batch = spec.batch_size;
    r.unit = unit;
    r.value = exact(v);
    return r;
  };
  const auto& t = f.tokens;
  if (t.tokens > 0) {
    for (const bool mx : {true, false})
      rep.rows.push_back(row(mx ? "max abs dlogprob" : "mean abs dlogprob", "nats", mx ? t.max_abs : t.mean_abs)
                             .with("tokens", static_cast<double>(t.tokens))
                             .with("requests", static_cast<double>(t.requests))
                             .with("failed_requests", static_cast<double>(f.failed_either)));
  } else {
    rep.add_warning(fmt::format("fidelity: no loglikelihood or rolling token of {} was scored in both runs: no dlogprob rows",
                                o.spec));
  }
  for (const auto& m : f.flips)
    rep.rows.push_back(row(fmt::format("flips {} {}", m.task, m.metric), "docs", static_cast<double>(m.flipped))
                           .with("docs", static_cast<double>(m.compared)));
  if (int8) {
    rep.add_note(fmt::format(
        "fidelity: {} run with --dtype {} twice (KV cache {}; one load each), --matmul exact and --matmul int8; abs "
        "dlogprob = |log p(exact) - log p(int8)| over every scored token of the loglikelihood and rolling requests "
        "(nats), each teacher-forced through the KV cache (the prompt in one pass, then one token per pass) since "
        "int8 runs in decode steps only; flips = documents whose acc/acc_norm/acc_bytes/exact_match value or "
        "generated text (greedy_text) differs between the two runs.",
        o.spec, f.dtype_a, to_string(resolve_kv_cache_dtype(spec.kv_cache_dtype, first))));
    return;
  }
  const std::string note = fmt::format(
      "fidelity: {} scored with --dtype {} (KV cache {}) and {} (KV cache {}; one load each); abs dlogprob = |log p({}) - log p({})| over every scored token of the "
      "loglikelihood and rolling requests (nats), flips = documents whose acc/acc_norm/acc_bytes/exact_match value "
      "or generated text (greedy_text) differs between the two runs.",
      o.spec, f.dtype_a, to_string(resolve_kv_cache_dtype(spec.kv_cache_dtype, ComputeDtype::F32)), f.dtype_b,
      to_string(resolve_kv_cache_dtype(spec.kv_cache_dtype, reduced)), f.dtype_a, f.dtype_b);
  rep.add_note(note);
}

}  // namespace kveval::bench
